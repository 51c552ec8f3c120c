"""The store's transactions, written once for every SQL dialect.

Each function runs inside one database transaction given as a `Tx` (the
dialect supplies the connection, the named queries and the transaction
runner). A failed condition raises `Abort`, which the runner turns into a
rollback of just that request and a `CommitResult` naming the conflict.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from waypost.model import approvals as ap_model
from waypost.model.events import Event, EventType, NewEvent, canonical_json, seal
from waypost.model.status import FINISHED, RunStatus

from .base import (
    ActivityTaskOp,
    ApprovalRecord,
    ClaimedTask,
    CommitResult,
    Conflict,
    CreateRunResult,
    CredentialRecord,
    DecideRequest,
    DecideResult,
    DefinitionRecord,
    FiredTimer,
    LeaseRenewal,
    LeaseState,
    NewApproval,
    NewCredential,
    NewRun,
    OutboxItem,
    RunCommit,
    RunRecord,
    TaskRef,
    WorkerRecord,
    WorkflowTaskOp,
)

_FINISHED = frozenset(s.value for s in FINISHED)


class Tx(Protocol):
    """One open transaction of a dialect, addressed by query name."""

    def one(self, name: str, params: dict[str, Any]) -> Sequence[Any] | None: ...

    def all(self, name: str, params: dict[str, Any]) -> list[Sequence[Any]]: ...

    def run(self, name: str, params: dict[str, Any]) -> int: ...

    def many(self, name: str, rows: list[dict[str, Any]]) -> None: ...

    def savepoint(self) -> AbstractContextManager[None]: ...

    def notify(self, topic: str) -> None:
        """Tell other processes, once this transaction commits, that `topic` has work."""
        ...


# Topics of notifications: a task became ready; a timer was set; a message waits.
TASKS = "tasks"
TIMERS = "timers"
OUTBOX = "outbox"


class Abort(Exception):
    """A condition of the request failed: roll it back and answer `result`."""

    def __init__(self, result: Any) -> None:
        super().__init__(getattr(result, "conflict", result))
        self.result = result


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def run_from_row(row: Sequence[Any]) -> RunRecord:
    return RunRecord(
        tenant=row[0],
        run_id=row[1],
        workflow=row[2],
        version=row[3],
        status=row[4],
        input=json.loads(row[5]),
        input_json=row[5],
        result=_loads(row[6]),
        error=_loads(row[7]),
        waiting_for=json.loads(row[8]) if row[8] else [],
        last_seq=row[9],
        last_hash=row[10],
        processed_seq=row[11],
        created_at=row[12],
        updated_at=row[13],
        finished_at=row[14],
    )


def event_from_row(row: Sequence[Any]) -> Event:
    return Event(
        seq=row[0], type=row[1], data=json.loads(row[2]), ts=row[3], hash=row[4], data_json=row[2]
    )


def task_from_row(row: Sequence[Any]) -> ClaimedTask:
    return ClaimedTask(
        kind=row[0],
        tenant=row[1],
        run_id=row[2],
        step=row[3],
        queue=row[4],
        fence=row[5],
        attempt=row[6],
        spec=_loads(row[7]),
        deadline=row[8],
        heartbeat_deadline=row[9],
        visible_at=row[10],
        owner=row[11],
        heartbeat_details=_loads(row[12]),
        cancel_requested=bool(row[13]),
    )


def worker_from_row(row: Sequence[Any]) -> WorkerRecord:
    return WorkerRecord(
        worker_id=row[0],
        host=row[1],
        pid=row[2],
        queues=json.loads(row[3]),
        started_at=row[4],
        heartbeat_at=row[5],
    )


def _event_rows(tenant: str, run_id: str, events: list[Event]) -> list[dict[str, Any]]:
    return [
        {
            "tenant": tenant,
            "run_id": run_id,
            "seq": ev.seq,
            "type": str(ev.type),
            "data": ev.data_json,
            "ts": ev.ts,
            "hash": ev.hash,
        }
        for ev in events
    ]


def get_run(tx: Tx, tenant: str, run_id: str) -> RunRecord | None:
    row = tx.one("get_run", {"tenant": tenant, "run_id": run_id})
    return run_from_row(row) if row else None


def create_run(tx: Tx, new: NewRun) -> CreateRunResult:
    key = {"tenant": new.tenant, "run_id": new.run_id}
    existing = get_run(tx, new.tenant, new.run_id)
    if existing is not None:
        return CreateRunResult(created=False, run=existing)
    events = seal(0, "", [new.started])
    input_json = canonical_json(new.input)
    tx.run(
        "insert_run",
        {
            **key,
            "workflow": new.workflow,
            "version": new.version,
            "input": input_json,
            "last_seq": events[-1].seq,
            "last_hash": events[-1].hash,
            "now": new.ts,
        },
    )
    tx.many("insert_event", _event_rows(new.tenant, new.run_id, events))
    claimed = new.claim_owner is not None
    fence = 1 if claimed else 0
    if not claimed:
        tx.notify(TASKS)
    tx.run(
        "insert_workflow_task",
        {
            **key,
            "queue": new.queue or f"{new.workflow}@{new.version}",
            "state": "leased" if claimed else "ready",
            "visible_at": new.ts + new.lease if claimed else new.ts,
            "owner": new.claim_owner,
            "fence": fence,
            "now": new.ts,
        },
    )
    run = RunRecord(
        tenant=new.tenant,
        run_id=new.run_id,
        workflow=new.workflow,
        version=new.version,
        status=RunStatus.RUNNING.value,
        input=new.input,
        input_json=input_json,
        result=None,
        error=None,
        waiting_for=[],
        last_seq=events[-1].seq,
        last_hash=events[-1].hash,
        processed_seq=0,
        created_at=new.ts,
        updated_at=new.ts,
        finished_at=None,
    )
    return CreateRunResult(created=True, run=run, workflow_fence=fence if claimed else None)


def commit_run(tx: Tx, c: RunCommit) -> CommitResult:
    key = {"tenant": c.tenant, "run_id": c.run_id}
    now = c.now

    if c.activity is not None:
        a = c.activity
        if a.op is ActivityTaskOp.DONE:
            n = tx.run("finish_activity_task", {**key, "step": a.step, "fence": a.fence})
        else:
            n = tx.run(
                "retry_activity_task",
                {
                    **key,
                    "step": a.step,
                    "fence": a.fence,
                    "retry_at": a.retry_at,
                    "heartbeat_details": a.heartbeat_details,
                },
            )
        if n != 1:
            raise Abort(CommitResult(Conflict.ACTIVITY_FENCE))

    wt: Sequence[Any] | None = None
    needs_task = c.workflow_fence is not None or c.workflow_op in (
        WorkflowTaskOp.WAKE,
        WorkflowTaskOp.CLAIM,
        WorkflowTaskOp.IDLE,
    )
    if needs_task:
        wt = tx.one("workflow_task", key)
        if c.workflow_fence is not None and (wt is None or wt[3] != c.workflow_fence):
            raise Abort(CommitResult(Conflict.WORKFLOW_FENCE))

    status = ""
    snap = c.snapshot
    if c.expect_seq is not None:
        prev_seq, prev_hash = c.expect_seq, c.expect_hash
        if c.require_active:
            head = tx.one("run_head", key)
            if head is None:
                raise Abort(CommitResult(Conflict.RUN_NOT_FOUND))
            if head[2] in _FINISHED:
                raise Abort(CommitResult(Conflict.RUN_FINISHED, status=head[2]))
    else:
        head = tx.one("run_head", key)
        if head is None:
            raise Abort(CommitResult(Conflict.RUN_NOT_FOUND))
        prev_seq, prev_hash, status = head[0], head[1], head[2]
        if c.require_active and status in _FINISHED:
            raise Abort(CommitResult(Conflict.RUN_FINISHED, status=status))
    events = seal(prev_seq, prev_hash, c.events)
    last_seq, last_hash = (events[-1].seq, events[-1].hash) if events else (prev_seq, prev_hash)
    head_params = {
        **key,
        "last_seq": last_seq,
        "last_hash": last_hash,
        "now": now,
        "expect_seq": prev_seq,
        "expect_hash": prev_hash,
    }
    if snap is not None:
        status = snap.status
        n = tx.run(
            "advance_run_snapshot",
            {
                **head_params,
                "status": snap.status,
                "waiting_for": canonical_json(snap.waiting_for),
                "processed_seq": snap.processed_seq,
                "result": None if snap.result is None else canonical_json(snap.result),
                "error": None if snap.error is None else canonical_json(snap.error),
                "finished_at": now if snap.finished else None,
            },
        )
    elif events or c.expect_seq is not None:
        n = tx.run("advance_run_checked", head_params)
    else:
        n = 1
    if n != 1:
        head = tx.one("run_head", key)
        raise Abort(CommitResult(Conflict.RUN_NOT_FOUND if head is None else Conflict.SEQ))
    if events:
        tx.many("insert_event", _event_rows(c.tenant, c.run_id, events))
    if c.set_version is not None:
        tx.run("set_run_version", {**key, "version": c.set_version})

    fence_after = _workflow_task_op(tx, c, wt)
    texts = {id(ev.data): ev.data_json for ev in events}  # a task's spec is often an event's data

    for na in c.new_activities:
        leased = na.owner is not None
        if not leased:
            tx.notify(TASKS)
        deadline = now + na.timeout
        hb_deadline = now + na.heartbeat_timeout if na.heartbeat_timeout is not None else None
        tx.run(
            "insert_activity_task",
            {
                **key,
                "step": na.step,
                "queue": na.activity,
                "state": "leased" if leased else "ready",
                "visible_at": min(now + na.lease, deadline, hb_deadline or deadline)
                if leased
                else now,
                "owner": na.owner,
                "fence": 1 if leased else 0,
                "attempt": 1 if leased else 0,
                "started_at": now if leased else None,
                "deadline": deadline if leased else None,
                "heartbeat_deadline": hb_deadline if leased else None,
                "timeout": na.timeout,
                "heartbeat_timeout": na.heartbeat_timeout,
                "spec": texts.get(id(na.spec)) or canonical_json(na.spec),
                "now": now,
            },
        )
    for step in c.cancel_activities:
        if tx.run("delete_ready_activity", {**key, "step": step}) == 0:
            tx.run("request_activity_cancel", {**key, "step": step})
    for timer in c.new_timers:
        tx.run("insert_timer", {**key, "step": timer.step, "fire_at": timer.fire_at})
        tx.notify(TIMERS)
    for step in c.cancel_timers:
        tx.run("cancel_timer", {**key, "step": step})
    for ap in c.new_approvals:
        _insert_approval(tx, c, ap)
    for approval_id, ap_status in c.close_approvals:
        _close_approval(tx, c.tenant, approval_id, ap_status, now)
    for approval_id, group in c.escalate_approvals:
        _escalate_approval(tx, c.tenant, approval_id, group, now)
    if c.close_run_approvals is not None:
        tx.run("close_run_approvals", {**key, "status": c.close_run_approvals, "now": now})
        tx.run("revoke_run_credentials", {**key, "now": now})
    if snap is not None and snap.finished:
        tx.run("delete_run_tasks", key)
        tx.run("delete_run_timers", key)

    return CommitResult(
        conflict=None,
        events=events,
        prev_seq=prev_seq,
        last_seq=last_seq,
        last_hash=last_hash,
        status=status,
        workflow_fence=fence_after,
        workflow_queue=wt[4] if wt is not None else "",
    )


def _workflow_task_op(tx: Tx, c: RunCommit, wt: Sequence[Any] | None) -> int | None:
    op = c.workflow_op
    if op is WorkflowTaskOp.LEAVE:
        return None
    if op is WorkflowTaskOp.DELETE:
        tx.run("delete_workflow_task", {"tenant": c.tenant, "run_id": c.run_id})
        return None
    if wt is None:
        return None
    state, visible_at, owner, fence, queue = wt
    key = {"tenant": c.tenant, "run_id": c.run_id}
    if op is WorkflowTaskOp.IDLE:
        if state != "idle":  # a step of a busy run leaves the row (and its page) untouched
            tx.run(
                "set_workflow_task",
                {**key, "state": "idle", "visible_at": None, "owner": owner, "fence": fence},
            )
        return None
    held_by_other = state == "leased" and visible_at is not None and visible_at > c.now
    if held_by_other:
        # Its holder's commit will fail the sequence check and take this event in.
        return None
    if (
        op is WorkflowTaskOp.CLAIM
        and c.owner is not None
        and (c.claim_queues is None or queue in c.claim_queues)
    ):
        tx.run(
            "set_workflow_task",
            {
                **key,
                "state": "leased",
                "visible_at": c.now + c.lease,
                "owner": c.owner,
                "fence": fence + 1,
            },
        )
        return int(fence + 1)
    if state != "ready" or (visible_at is not None and visible_at > c.now):
        tx.run(
            "set_workflow_task",
            {**key, "state": "ready", "visible_at": c.now, "owner": owner, "fence": fence},
        )
    tx.notify(TASKS)
    return None


def claim_tasks(
    tx: Tx,
    owner: str,
    workflow_queues: Sequence[str],
    activity_queues: Sequence[str],
    workflow_limit: int,
    activity_limit: int,
    lease: float,
    now: float,
) -> list[ClaimedTask]:
    claimed: list[ClaimedTask] = []
    params = {"owner": owner, "now": now, "lease_until": now + lease}
    if workflow_queues and workflow_limit > 0:
        rows = tx.all(
            "claim_workflow_tasks",
            {**params, "queues": json.dumps(list(workflow_queues)), "limit": workflow_limit},
        )
        claimed.extend(task_from_row(r) for r in rows)
    if activity_queues and activity_limit > 0:
        rows = tx.all(
            "claim_activity_tasks",
            {**params, "queues": json.dumps(list(activity_queues)), "limit": activity_limit},
        )
        claimed.extend(task_from_row(r) for r in rows)
    return claimed


def renew_leases(
    tx: Tx, owner: str, renewals: Sequence[LeaseRenewal], lease: float, now: float
) -> list[LeaseState]:
    states = []
    for r in renewals:
        t = r.task
        row = tx.one(
            "renew_lease",
            {
                "tenant": t.tenant,
                "run_id": t.run_id,
                "kind": t.kind,
                "step": t.step,
                "fence": t.fence,
                "owner": owner,
                "lease_until": now + lease,
                "heartbeat_at": r.heartbeat_at,
                "heartbeat_details": r.heartbeat_details,
            },
        )
        states.append(LeaseState(t, held=row is not None, cancel_requested=bool(row and row[0])))
    return states


def release_tasks(tx: Tx, owner: str, tasks: Sequence[TaskRef], now: float) -> None:
    if tasks:
        tx.notify(TASKS)
    for t in tasks:
        tx.run(
            "release_task",
            {
                "tenant": t.tenant,
                "run_id": t.run_id,
                "kind": t.kind,
                "step": t.step,
                "fence": t.fence,
                "owner": owner,
                "now": now,
            },
        )


def load_run(
    tx: Tx, tenant: str, run_id: str, after_seq: int
) -> tuple[RunRecord | None, list[Event]]:
    """The snapshot and the events after `after_seq`; run in one (snapshot) transaction."""
    run = get_run(tx, tenant, run_id)
    if run is None:
        return None, []
    return run, load_history(tx, tenant, run_id, after_seq)


# == reads =====================================================================


def load_history(tx: Tx, tenant: str, run_id: str, after_seq: int) -> list[Event]:
    rows = tx.all("load_history", {"tenant": tenant, "run_id": run_id, "after_seq": after_seq})
    return [event_from_row(r) for r in rows]


def list_runs(
    tx: Tx, tenant: str | None, status: str | None, workflow: str | None, limit: int
) -> list[RunRecord]:
    params = {"tenant": tenant, "status": status, "workflow": workflow, "limit": limit}
    return [run_from_row(r) for r in tx.all("list_runs", params)]


def run_tasks(tx: Tx, tenant: str, run_id: str) -> list[ClaimedTask]:
    return [task_from_row(r) for r in tx.all("run_tasks", {"tenant": tenant, "run_id": run_id})]


def expired_activities(tx: Tx, now: float, limit: int) -> list[ClaimedTask]:
    return [task_from_row(r) for r in tx.all("expired_activities", {"now": now, "limit": limit})]


def next_timer_at(tx: Tx) -> float | None:
    row = tx.one("next_timer_at", {})
    return None if row is None or row[0] is None else float(row[0])


def live_workers(tx: Tx, since: float) -> list[WorkerRecord]:
    return [worker_from_row(r) for r in tx.all("live_workers", {"since": since})]


# == workers ===================================================================


def beat_worker(tx: Tx, worker: WorkerRecord) -> None:
    tx.run(
        "beat_worker",
        {
            "worker_id": worker.worker_id,
            "host": worker.host,
            "pid": worker.pid,
            "queues": json.dumps(worker.queues),
            "started_at": worker.started_at,
            "heartbeat_at": worker.heartbeat_at,
        },
    )


def remove_worker(tx: Tx, worker_id: str) -> None:
    tx.run("remove_worker", {"worker_id": worker_id})


def fire_due_timers(
    tx: Tx, now: float, limit: int, owner: str | None, queues: Sequence[str], lease: float
) -> list[FiredTimer]:
    fired: list[FiredTimer] = []
    claim_queues = frozenset(queues)
    for tenant, run_id, step, generation in tx.all("due_timers", {"now": now, "limit": limit}):
        key = {"tenant": tenant, "run_id": run_id, "step": step}
        if tx.run("fire_timer", {**key, "generation": generation}) != 1:
            continue
        commit = RunCommit(
            tenant=tenant,
            run_id=run_id,
            events=[NewEvent(EventType.TIMER_FIRED, {"step": step, "generation": generation}, now)],
            now=now,
            workflow_op=WorkflowTaskOp.CLAIM if owner else WorkflowTaskOp.WAKE,
            owner=owner,
            lease=lease,
            claim_queues=claim_queues,
        )
        try:
            with tx.savepoint():
                result = commit_run(tx, commit)
        except Abort:
            continue  # the run is gone; the timer stays fired
        fired.append(
            FiredTimer(
                tenant=tenant,
                run_id=run_id,
                step=step,
                queue=result.workflow_queue,
                event=result.events[0],
                workflow_fence=result.workflow_fence,
            )
        )
    return fired


# == approvals ===================================================================
_APPROVAL_REQUESTED = "approval.requested"


def approval_from_row(row: Sequence[Any]) -> ApprovalRecord:
    return ApprovalRecord(
        tenant=row[0],
        approval_id=row[1],
        run_id=row[2],
        step=row[3],
        timer_step=row[4],
        name=row[5],
        policy=json.loads(row[6]),
        status=row[7],
        started_by=row[8],
        data=_loads(row[9]),
        expires_at=row[10],
        created_at=row[11],
        closed_at=row[12],
    )


def _insert_approval(tx: Tx, c: RunCommit, a: NewApproval) -> None:
    n = tx.run(
        "insert_approval",
        {
            "tenant": c.tenant,
            "approval_id": a.approval_id,
            "run_id": c.run_id,
            "step": a.step,
            "timer_step": a.timer_step,
            "name": a.name,
            "policy": canonical_json(a.policy),
            "started_by": a.started_by,
            "data": canonical_json(a.data),
            "expires_at": a.expires_at,
            "now": c.now,
        },
    )
    if n:
        # Who is asked is worked out when the message is sent (groups are
        # resolved then); the credentials are made then too, never stored in clear.
        _add_outbox(
            tx,
            OutboxItem(
                id=f"{a.approval_id}:requested",
                tenant=c.tenant,
                kind=_APPROVAL_REQUESTED,
                payload={"approval_id": a.approval_id},
                attempts=0,
            ),
            c.now,
        )


def _escalate_approval(tx: Tx, tenant: str, approval_id: str, group: str, now: float) -> None:
    """Let `group` decide too, and notify its members (those not asked already)."""
    key = {"tenant": tenant, "approval_id": approval_id}
    row = tx.one("lock_approval", key)
    if row is None or row[7] != ap_model.PENDING:
        return
    policy = json.loads(row[6])
    if group not in policy.get("groups", []):
        policy["groups"] = [*policy.get("groups", []), group]
        if policy.get("kind") == "all":
            policy["kind"] = "any"  # "all of" named users cannot take a group: anyone may
        tx.run("set_approval_policy", {**key, "policy": canonical_json(policy)})
    _add_outbox(
        tx,
        OutboxItem(
            id=f"{approval_id}:escalated:{group}",
            tenant=tenant,
            kind=_APPROVAL_REQUESTED,
            payload={"approval_id": approval_id},
            attempts=0,
        ),
        now,
    )


def _close_approval(tx: Tx, tenant: str, approval_id: str, status: str, now: float) -> bool:
    key = {"tenant": tenant, "approval_id": approval_id, "now": now}
    if tx.run("close_approval", {**key, "status": status}) != 1:
        return False
    tx.run("revoke_approval_credentials", key)
    return True


def get_approval(tx: Tx, tenant: str, approval_id: str) -> ApprovalRecord | None:
    row = tx.one("get_approval", {"tenant": tenant, "approval_id": approval_id})
    return approval_from_row(row) if row else None


def list_approvals(
    tx: Tx, tenant: str | None, status: str | None, run_id: str | None, limit: int
) -> list[ApprovalRecord]:
    rows = tx.all(
        "list_approvals", {"tenant": tenant, "status": status, "run_id": run_id, "limit": limit}
    )
    return [approval_from_row(r) for r in rows]


def get_credential(tx: Tx, tenant: str, credential_id: str) -> CredentialRecord | None:
    row = tx.one("get_credential", {"tenant": tenant, "credential_id": credential_id})
    return CredentialRecord(*row) if row else None


def approval_votes(tx: Tx, tenant: str, approval_id: str) -> list[dict[str, Any]]:
    rows = tx.all("approval_votes", {"tenant": tenant, "approval_id": approval_id})
    return [{"principal": r[0], "decision": r[1], "comment": r[2], "at": r[3]} for r in rows]


def decide_approval(tx: Tx, d: DecideRequest) -> DecideResult:
    """Consume the credential, count the vote, and record it in the run's history.

    Every condition is checked here, in the transaction that writes: the approval
    is still pending, its expiry has not fired, the credential is still active,
    unexpired and unused (of two concurrent uses exactly one passes), and the
    principal has not voted. A failed condition rolls everything back.
    """
    key = {"tenant": d.tenant, "approval_id": d.approval_id, "now": d.now}
    row = tx.one("lock_approval", key)
    if row is None:
        raise Abort(DecideResult(False, "unknown approval"))
    approval = approval_from_row(row)
    if approval.status != ap_model.PENDING:
        raise Abort(DecideResult(False, f"the approval is {approval.status} already"))
    if approval.timer_step is not None:
        timer = tx.one(
            "timer_status",
            {"tenant": d.tenant, "run_id": approval.run_id, "step": approval.timer_step},
        )
        if timer is not None and timer[0] == "fired":
            raise Abort(DecideResult(False, "the approval has expired"))
    if tx.run("use_credential", {**key, "credential_id": d.credential_id}) != 1:
        raise Abort(DecideResult(False, "the credential was used, revoked or has expired"))
    # The credential for the other action is spent with it: one decision per approver.
    tx.run("retire_approver_credentials", {**key, "approver": d.principal, "status": "used"})
    voted = tx.run(
        "insert_vote",
        {
            **key,
            "principal": d.principal,
            "decision": d.decision,
            "comment": d.comment,
            "credential_id": d.credential_id,
        },
    )
    if voted != 1:
        raise Abort(DecideResult(False, f"{d.principal} has decided on this approval already"))
    votes = approval_votes(tx, d.tenant, d.approval_id)
    policy = ap_model.Policy.from_json(approval.policy)
    outcome = ap_model.tally(
        policy,
        [ap_model.Vote(v["principal"], v["decision"]) for v in votes],
        d.eligible,
    )
    resolved = outcome != ap_model.PENDING
    if resolved:
        _close_approval(tx, d.tenant, d.approval_id, outcome, d.now)
    data: dict[str, Any] = {
        "step": approval.step,
        "approval_id": d.approval_id,
        "principal": d.principal,
        "decision": d.decision,
        "comment": d.comment,
        "credential_id": d.credential_id,
        "auth": d.auth,
        "outcome": outcome,
    }
    if resolved:
        data["votes"] = votes
    res = commit_run(
        tx,
        RunCommit(
            tenant=d.tenant,
            run_id=approval.run_id,
            events=[NewEvent(EventType.APPROVAL_DECIDED, data, d.now)],
            now=d.now,
            require_active=True,
            workflow_op=WorkflowTaskOp.WAKE if resolved else WorkflowTaskOp.LEAVE,
        ),
    )
    return DecideResult(True, outcome=outcome, run_id=approval.run_id, seq=res.last_seq)


def change_approvers(
    tx: Tx,
    tenant: str,
    approval_id: str,
    policy: dict[str, Any],
    revoke: str | None,
    notify: str | None,
    event: NewEvent,
    now: float,
) -> bool:
    key = {"tenant": tenant, "approval_id": approval_id, "now": now}
    row = tx.one("lock_approval", key)
    if row is None or row[7] != ap_model.PENDING:
        return False
    approval = approval_from_row(row)
    tx.run("set_approval_policy", {**key, "policy": canonical_json(policy)})
    if revoke is not None:
        tx.run("retire_approver_credentials", {**key, "approver": revoke, "status": "revoked"})
    if notify is not None:
        _add_outbox(
            tx,
            OutboxItem(
                id=f"{approval_id}:notify:{notify}:{now!r}",
                tenant=tenant,
                kind="approval.notify",
                payload={"approval_id": approval_id, "approver": notify},
                attempts=0,
            ),
            now,
        )
    commit_run(
        tx,
        RunCommit(
            tenant=tenant, run_id=approval.run_id, events=[event], now=now, require_active=True
        ),
    )
    return True


def issue_credentials(
    tx: Tx,
    tenant: str,
    approval_id: str,
    approver: str,
    credentials: Sequence[NewCredential],
    now: float,
) -> ApprovalRecord | None:
    row = tx.one("lock_approval", {"tenant": tenant, "approval_id": approval_id})
    if row is None or row[7] != ap_model.PENDING:
        return None
    approval = approval_from_row(row)
    for cred in credentials:
        tx.run(
            "insert_credential",
            {
                "tenant": tenant,
                "credential_id": cred.credential_id,
                "approval_id": approval_id,
                "approver": approver,
                "action": cred.action,
                "secret_hash": cred.secret_hash,
                "expires_at": approval.expires_at,
                "now": now,
            },
        )
    return approval


# == the directory ===================================================================
def group_members(tx: Tx, tenant: str, group: str) -> list[str]:
    return [r[0] for r in tx.all("group_members", {"tenant": tenant, "group_name": group})]


def list_groups(tx: Tx, tenant: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for group, principal in tx.all("list_groups", {"tenant": tenant}):
        out.setdefault(group, []).append(principal)
    return out


def add_group_members(
    tx: Tx, tenant: str, group: str, principals: Sequence[str], now: float
) -> int:
    return sum(
        tx.run(
            "add_group_member",
            {"tenant": tenant, "group_name": group, "principal": p, "now": now},
        )
        for p in principals
    )


def remove_group_members(tx: Tx, tenant: str, group: str, principals: Sequence[str]) -> int:
    return sum(
        tx.run("remove_group_member", {"tenant": tenant, "group_name": group, "principal": p})
        for p in principals
    )


# == the outbox ======================================================================
def _add_outbox(tx: Tx, item: OutboxItem, now: float) -> None:
    tx.run(
        "insert_outbox",
        {
            "id": item.id,
            "tenant": item.tenant,
            "kind": item.kind,
            "payload": canonical_json(item.payload),
            "now": now,
        },
    )
    tx.notify(OUTBOX)


def add_outbox(tx: Tx, items: Sequence[OutboxItem], now: float) -> None:
    for item in items:
        _add_outbox(tx, item, now)


def claim_outbox(tx: Tx, owner: str, now: float, limit: int, lease: float) -> list[OutboxItem]:
    rows = tx.all(
        "claim_outbox",
        {"owner": owner, "now": now, "limit": limit, "lease_until": now + lease},
    )
    return [OutboxItem(r[0], r[1], r[2], json.loads(r[3]), int(r[4])) for r in rows]


def finish_outbox(
    tx: Tx, item_id: str, owner: str, now: float, error: str | None, retry_at: float | None
) -> None:
    key = {"id": item_id, "owner": owner, "now": now}
    if error is None:
        tx.run("outbox_sent", key)
    elif retry_at is not None:
        tx.run("outbox_retry", {**key, "error": error[:2000], "retry_at": retry_at})
    else:
        tx.run("outbox_failed", {**key, "error": error[:2000]})


# == definitions ======================================================================
def _definition(row: Sequence[Any]) -> DefinitionRecord:
    return DefinitionRecord(
        tenant=row[0],
        name=row[1],
        version=int(row[2]),
        digest=row[3],
        body=json.loads(row[4]),
        source=row[5],
        published_at=row[6],
        published_by=row[7],
    )


def publish_definition(
    tx: Tx,
    tenant: str,
    name: str,
    digest: str,
    body: dict[str, Any],
    source: str,
    by: str | None,
    now: float,
) -> tuple[DefinitionRecord, bool]:
    key = {"tenant": tenant, "name": name}
    for _ in range(5):  # another publisher may take the next version first
        found = tx.one("definition_by_digest", {**key, "digest": digest})
        if found is not None:
            row = tx.one("get_definition", {**key, "version": found[0]})
            assert row is not None
            return _definition(row), False
        newest = tx.one("newest_definition_version", key)
        version = int(newest[0] or 0) + 1 if newest else 1
        inserted = tx.run(
            "insert_definition",
            {
                **key,
                "version": version,
                "digest": digest,
                "body": canonical_json(body),
                "source": source,
                "now": now,
                "by": by,
            },
        )
        if inserted:
            row = tx.one("get_definition", {**key, "version": version})
            assert row is not None
            return _definition(row), True
    raise Abort(None)


def get_definition(tx: Tx, tenant: str, name: str, version: int | None) -> DefinitionRecord | None:
    key = {"tenant": tenant, "name": name}
    if version is None:
        row = tx.one("get_newest_definition", key)
    else:
        row = tx.one("get_definition", {**key, "version": version})
    return _definition(row) if row else None


def list_definitions(tx: Tx, tenant: str) -> list[DefinitionRecord]:
    return [_definition(r) for r in tx.all("list_definitions", {"tenant": tenant})]
