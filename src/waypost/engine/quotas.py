"""The quotas an engine applies outside the store's admissions, per tenant, kept briefly.

The store judges admissions (starts, publishes, leases, timers) with the tenant's
row read in the same transaction. What the engine itself decides with quotas — a
payload's size, a run's history length, whether to lease new activities under a
quota — reads them here: the engine's defaults with the tenant's overrides, kept
`TTL` seconds so a step costs no read. A change made through this engine applies
at once (`forget`); one made through another engine, within `TTL`.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from waypost.errors import QuotaExceeded, WorkflowBug
from waypost.model.events import NewEvent, RunSuspended, canonical_json
from waypost.model.identity import preview
from waypost.model.quotas import Quotas
from waypost.model.status import RunStatus
from waypost.runtime.instance import WorkflowInstance
from waypost.store.base import (
    CommitResult,
    Conflict,
    RunCommit,
    RunRecord,
    Snapshot,
    Store,
    WorkflowTaskOp,
)
from waypost.store.effects import ContinueAsNew, SettleActivity

TTL = 5.0
MAX_TENANTS = 10_000
QUOTA_RETRY = 1.0
"""Seconds before a run whose decision waits for a quota (pending timers) decides again."""


class QuotaBook:
    """Effective quotas by tenant: `defaults` with each tenant's stored overrides.

    A `max_payload_bytes` neither sets is what `payload_default(tenant)` says (the
    tenant's `Limits`, which the engine that owns this book knows), so that every check
    of a payload's size reads one number.
    """

    def __init__(self, store: Store, defaults: Quotas, clock: Callable[[], float]) -> None:
        self.store = store
        self.defaults = defaults
        self.clock = clock
        self.payload_default: Callable[[str], int | None] = lambda tenant: None
        self._known: OrderedDict[str, tuple[float, Quotas]] = OrderedDict()

    async def get(self, tenant: str) -> Quotas:
        """The tenant's effective quotas (read at most every `TTL` seconds)."""
        now = self.clock()
        known = self._known.get(tenant)
        if known is not None and 0 <= now - known[0] < TTL:
            return known[1]
        quotas = self.defaults.effective(await self.store.tenant_quotas(tenant))
        if quotas.max_payload_bytes is None:
            default = self.payload_default(tenant)
            if default is not None:
                quotas = dataclasses.replace(quotas, max_payload_bytes=default)
        self._known[tenant] = (now, quotas)
        self._known.move_to_end(tenant)
        while len(self._known) > MAX_TENANTS:
            self._known.popitem(last=False)
        return quotas

    def forget(self, tenant: str) -> None:
        """The tenant's quotas changed: read them again next time."""
        self._known.pop(tenant, None)


HISTORY_FULL_DETAIL = (
    "the run's history is as long as its tenant allows (max_events_per_run): a workflow "
    "that loops should call ctx.continue_as_new(...) to go on with a fresh history; or raise "
    "the tenant's quota and resume the run"
)
INPUT_TOO_LARGE_DETAIL = (
    "the workflow code continues as new with an input larger than its tenant allows "
    "(max_payload_bytes), which is a bug: make the input smaller and resume the run, or "
    "raise the tenant's quota and resume it (or terminate it)"
)


def over_quota(commit: RunCommit, fed: int, quotas: Quotas, processed_seq: int) -> RunCommit | None:
    """`commit` (a decision: `fed` events fed to the code, first in `commit.events`, then
    what the code decided) turned into the run's suspension if it breaks one of the tenant's
    `quotas` the engine judges; None if it breaks none.

    - A continuation whose next generation's input is larger than `max_payload_bytes` (as
      a start's input is measured): a bug in the code, as an input the codec cannot store
      is; nothing of the next generation is written.
    - A decision that would take the history past `max_events_per_run`.

    The decision is not recorded and the run's `processed_seq` stays where it was
    (`processed_seq`, the last event the code was known to have taken in when it was
    replayed), so a resume replays the code and decides again, under the quotas then.
    """
    most = quotas.max_payload_bytes
    continuation = commit.effect(ContinueAsNew)
    if continuation is not None and most is not None:
        size = len(canonical_json(continuation.input).encode())
        if size > most:
            message = (
                f"the input to continue as new is {size} bytes of JSON; its tenant allows at "
                f"most {most} (max_payload_bytes)"
            )
            bug = WorkflowBug(
                message,
                error_type="QuotaExceeded",
                error_message=message,
                module=QuotaExceeded.__module__,
                site="",
                traceback_text="",
            )
            error = {**bug.to_json(), "quota": "max_payload_bytes", "size": size, "most": most}
            return _held(commit, fed, processed_seq, error, INPUT_TOO_LARGE_DETAIL)
    most = quotas.max_events_per_run
    if most is not None and (commit.expect_seq or 0) + len(commit.events) > most:
        error = {
            "type": "QuotaExceeded",
            "quota": "max_events_per_run",
            "message": f"the run's history would pass {most} events, the most its tenant "
            "allows (max_events_per_run); the run is suspended instead of growing it. A "
            "workflow that loops should continue as new (ctx.continue_as_new) to keep its "
            "history short",
        }
        return _held(commit, fed, processed_seq, error, HISTORY_FULL_DETAIL)
    return None


HISTORY_BYTES_DETAIL = (
    "the run's history holds as many bytes as its tenant allows (max_run_bytes): keep large "
    "values out of the history (store them elsewhere and pass a reference), or continue as "
    "new (ctx.continue_as_new) to start a fresh history; or raise the tenant's quota and "
    "resume the run"
)


def bytes_held(
    commit: RunCommit, fed: Sequence[NewEvent], inst: WorkflowInstance, quotas: Quotas
) -> RunCommit:
    """The run suspended instead of `commit`, the decision of `inst` (after the events it
    was `fed`, first in the commit) that the store refused because it would take the run's
    history past the tenant's `max_run_bytes`. What was fed is kept (results of the work
    the run scheduled are always taken in); what the code decided is not, and a resume
    replays the code, which decides again."""
    most = quotas.max_run_bytes
    error = {
        "type": "QuotaExceeded",
        "quota": "max_run_bytes",
        "message": f"the run's history would pass {most} bytes of JSON, the most its tenant "
        "allows (max_run_bytes); the run is suspended instead of growing it",
    }
    return _held(commit, len(fed), inst.processed_seq, error, HISTORY_BYTES_DETAIL)


def refused_append(res: CommitResult, commit: RunCommit, what: str) -> QuotaExceeded | None:
    """The refusal of an append from outside the run (a signal) that a quota of `commit`
    turned down, naming the quota; None if no quota did."""
    run = preview(commit.run_id)
    conflict, limits = res.conflict, commit.limits
    if conflict is Conflict.BACKLOG:
        return QuotaExceeded(
            "max_pending_signals",
            f"cannot {what}: run {run} has {limits.max_pending_signals} signals it has not "
            "taken in yet, the most its tenant allows; try again once it has",
        )
    if conflict is Conflict.HISTORY_FULL:
        return QuotaExceeded(
            "max_events_per_run",
            f"cannot {what}: run {run}'s history has {limits.max_events} events, the most its "
            "tenant allows",
        )
    if conflict is Conflict.HISTORY_BYTES:
        return QuotaExceeded(
            "max_run_bytes",
            f"cannot {what}: run {run}'s history would pass {limits.max_run_bytes} bytes of "
            "JSON, the most its tenant allows (max_run_bytes)",
        )
    if conflict is Conflict.TENANT_BYTES:
        return QuotaExceeded(
            "max_live_run_bytes",
            f"cannot {what}: the tenant's runs not yet finished would hold more than "
            f"{limits.max_live_run_bytes} bytes of history (max_live_run_bytes); try again "
            "when runs have ended",
            retry_after=QUOTA_RETRY,
        )
    return None


def _held(
    commit: RunCommit, fed: int, processed_seq: int, error: dict[str, Any], detail: str
) -> RunCommit:
    """The run suspended with `error` instead of `commit`: only the events fed to the code
    (and the activity update that fed them) are kept, then RunSuspended."""
    suspended = RunSuspended(error=error).at(commit.now)
    events = [*commit.events[:fed], suspended]
    waiting = [{"kind": "operator", "detail": detail}]
    return RunCommit(
        tenant=commit.tenant,
        run_id=commit.run_id,
        events=events,
        now=commit.now,
        expect_seq=commit.expect_seq,
        expect_hash=commit.expect_hash,
        snapshot=Snapshot(RunStatus.SUSPENDED.value, waiting, processed_seq, error=error),
        workflow_fence=commit.workflow_fence,
        workflow_op=WorkflowTaskOp.IDLE,
        effects=(settle,) if (settle := commit.effect(SettleActivity)) is not None else (),
    )


def deferral(
    run: RunRecord,
    fence: int,
    last_seq: int,
    last_hash: str,
    extra: Sequence[NewEvent],
    now: float,
    quotas: Quotas,
) -> RunCommit:
    """The commit that puts off a run's decision by `QUOTA_RETRY` seconds: the run's code
    is not advanced (its processed_seq stays), its `waiting_for` says it waits for the
    tenant's `max_pending_timers`, and its workflow task is claimable again then."""
    detail = (
        f"the run's next step starts a timer and tenant {run.tenant!r} has "
        f"{quotas.max_pending_timers} pending, the most it may have: the step is decided "
        "again when one has fired or been cancelled"
    )
    waiting = [
        {"kind": "quota", "quota": "max_pending_timers", "detail": detail},
        *(w for w in run.waiting_for if w.get("kind") != "quota"),
    ]
    return RunCommit(
        tenant=run.tenant,
        run_id=run.run_id,
        events=list(extra),
        now=now,
        expect_seq=last_seq,
        expect_hash=last_hash,
        snapshot=Snapshot(RunStatus.WAITING.value, waiting, run.processed_seq),
        workflow_fence=fence,
        workflow_op=WorkflowTaskOp.DEFER,
        defer_until=now + QUOTA_RETRY,
    )
