"""The Store verbs, once for every SQL dialect.

A dialect supplies how a transaction function runs (`_write`: in a write
transaction; `_read`: in a read-only snapshot) and its own lifecycle; the verbs
below are the same for all of them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from waypost.model.events import Event, NewEvent

from . import transactions as txn
from .base import (
    ApprovalRecord,
    ClaimedTask,
    CommitResult,
    CreateRunResult,
    CredentialRecord,
    DecideRequest,
    DecideResult,
    DefinitionRecord,
    FiredTimer,
    LeaseRenewal,
    LeaseState,
    NewCredential,
    NewRun,
    OutboxItem,
    RunCommit,
    RunRecord,
    TaskRef,
    WorkerRecord,
)

T = TypeVar("T")


class SqlStore:
    """Implements the `Store` verbs with the shared transactions in `transactions.py`."""

    async def _write(self, fn: Callable[..., T], *args: Any) -> T:
        raise NotImplementedError

    async def _read(self, fn: Callable[..., T], *args: Any) -> T:
        raise NotImplementedError

    async def create_run(self, new: NewRun) -> CreateRunResult:
        return await self._write(txn.create_run, new)

    async def commit_run(self, commit: RunCommit) -> CommitResult:
        return await self._write(txn.commit_run, commit)

    async def claim_tasks(
        self,
        owner: str,
        workflow_queues: Sequence[str],
        activity_queues: Sequence[str],
        workflow_limit: int,
        activity_limit: int,
        lease: float,
        now: float,
    ) -> list[ClaimedTask]:
        return await self._write(
            txn.claim_tasks,
            owner,
            workflow_queues,
            activity_queues,
            workflow_limit,
            activity_limit,
            lease,
            now,
        )

    async def renew_leases(
        self, owner: str, renewals: Sequence[LeaseRenewal], lease: float, now: float
    ) -> list[LeaseState]:
        return await self._write(txn.renew_leases, owner, renewals, lease, now)

    async def release_tasks(self, owner: str, tasks: Sequence[TaskRef], now: float) -> None:
        await self._write(txn.release_tasks, owner, tasks, now)

    async def expired_activities(self, now: float, limit: int) -> list[ClaimedTask]:
        return await self._read(txn.expired_activities, now, limit)

    async def fire_due_timers(
        self, now: float, limit: int, owner: str | None, queues: Sequence[str], lease: float
    ) -> list[FiredTimer]:
        return await self._write(txn.fire_due_timers, now, limit, owner, queues, lease)

    async def next_timer_at(self) -> float | None:
        return await self._read(txn.next_timer_at)

    async def get_run(self, tenant: str, run_id: str) -> RunRecord | None:
        return await self._read(txn.get_run, tenant, run_id)

    async def load_history(self, tenant: str, run_id: str, after_seq: int = 0) -> list[Event]:
        return await self._read(txn.load_history, tenant, run_id, after_seq)

    async def list_runs(
        self,
        tenant: str | None = None,
        status: str | None = None,
        workflow: str | None = None,
        limit: int = 100,
    ) -> list[RunRecord]:
        return await self._read(txn.list_runs, tenant, status, workflow, limit)

    async def load_run(
        self, tenant: str, run_id: str, after_seq: int = 0
    ) -> tuple[RunRecord | None, list[Event]]:
        return await self._read(txn.load_run, tenant, run_id, after_seq)

    async def run_tasks(self, tenant: str, run_id: str) -> list[ClaimedTask]:
        return await self._read(txn.run_tasks, tenant, run_id)

    async def beat_worker(self, worker: WorkerRecord) -> None:
        await self._write(txn.beat_worker, worker)

    async def remove_worker(self, worker_id: str) -> None:
        await self._write(txn.remove_worker, worker_id)

    async def live_workers(self, since: float) -> list[WorkerRecord]:
        return await self._read(txn.live_workers, since)

    # -- approvals, the directory and the outbox --------------------------------
    async def get_approval(self, tenant: str, approval_id: str) -> ApprovalRecord | None:
        return await self._read(txn.get_approval, tenant, approval_id)

    async def list_approvals(
        self,
        tenant: str | None,
        status: str | None = None,
        run_id: str | None = None,
        limit: int = 100,
    ) -> list[ApprovalRecord]:
        return await self._read(txn.list_approvals, tenant, status, run_id, limit)

    async def get_credential(self, tenant: str, credential_id: str) -> CredentialRecord | None:
        return await self._read(txn.get_credential, tenant, credential_id)

    async def approval_votes(self, tenant: str, approval_id: str) -> list[dict[str, Any]]:
        return await self._read(txn.approval_votes, tenant, approval_id)

    async def decide_approval(self, request: DecideRequest) -> DecideResult:
        return await self._write(txn.decide_approval, request)

    async def change_approvers(
        self,
        tenant: str,
        approval_id: str,
        policy: dict[str, Any],
        revoke: str | None,
        notify: str | None,
        event: NewEvent,
        now: float,
    ) -> bool:
        return await self._write(
            txn.change_approvers, tenant, approval_id, policy, revoke, notify, event, now
        )

    async def issue_credentials(
        self,
        tenant: str,
        approval_id: str,
        approver: str,
        credentials: Sequence[NewCredential],
        now: float,
    ) -> ApprovalRecord | None:
        return await self._write(
            txn.issue_credentials, tenant, approval_id, approver, credentials, now
        )

    async def add_outbox(self, items: Sequence[OutboxItem], now: float) -> None:
        await self._write(txn.add_outbox, items, now)

    async def claim_outbox(
        self, owner: str, now: float, limit: int, lease: float
    ) -> list[OutboxItem]:
        return await self._write(txn.claim_outbox, owner, now, limit, lease)

    async def finish_outbox(
        self, item_id: str, owner: str, now: float, error: str | None, retry_at: float | None
    ) -> None:
        await self._write(txn.finish_outbox, item_id, owner, now, error, retry_at)

    async def group_members(self, tenant: str, group: str) -> list[str]:
        return await self._read(txn.group_members, tenant, group)

    async def list_groups(self, tenant: str) -> dict[str, list[str]]:
        return await self._read(txn.list_groups, tenant)

    async def add_group_members(
        self, tenant: str, group: str, principals: Sequence[str], now: float
    ) -> int:
        return await self._write(txn.add_group_members, tenant, group, principals, now)

    async def remove_group_members(self, tenant: str, group: str, principals: Sequence[str]) -> int:
        return await self._write(txn.remove_group_members, tenant, group, principals)

    # -- definitions -------------------------------------------------------------
    async def publish_definition(
        self,
        tenant: str,
        name: str,
        digest: str,
        body: dict[str, Any],
        source: str,
        by: str | None,
        now: float,
    ) -> tuple[DefinitionRecord, bool]:
        return await self._write(
            txn.publish_definition, tenant, name, digest, body, source, by, now
        )

    async def get_definition(
        self, tenant: str, name: str, version: int | None = None
    ) -> DefinitionRecord | None:
        return await self._read(txn.get_definition, tenant, name, version)

    async def list_definitions(self, tenant: str) -> list[DefinitionRecord]:
        return await self._read(txn.list_definitions, tenant)
