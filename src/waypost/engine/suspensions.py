"""Why a run is suspended, in the words its snapshot and its RunSuspended event keep.

A run is suspended, never failed, when what stops it is not a business outcome:
its code no longer matches its history, its history fails its integrity check,
its code raised an exception that is not a failure (a bug), its work keeps
killing the engines that take it (a poison run), or processing it keeps failing
(a write the database refuses, a fault in the engine). Each waits for an
operator: `resume` after a fix, or `terminate`.
"""

from __future__ import annotations

import traceback
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from waypost.errors import BrokenHistory, NondeterminismError, WaypostError, WorkflowBug
from waypost.model.chain import Chain
from waypost.model.codec import error_to_json
from waypost.model.events import ActivityFailed, Event, NewEvent, RunSuspended
from waypost.model.logs import logger
from waypost.model.status import FINISHED, RunStatus
from waypost.runtime.instance import WorkflowInstance
from waypost.store.base import (
    ActivityTaskOp,
    ClaimedTask,
    CommitResult,
    Conflict,
    RunCommit,
    RunRecord,
    Snapshot,
    Store,
    WorkflowTaskOp,
)
from waypost.store.effects import SettleActivity

from .attempts import Attempt, Outcome

_FINISHED = frozenset(s.value for s in FINISHED)
log = logger("waypost")
# Tries at a run's work that fails again as it is (a write the database refuses, a
# fault in the engine) before the run is suspended with the reason.
REFUSAL_TRIES = 3


class PoisonRun(WaypostError):
    """A run's work lost its engine (the process died, the lease lapsed) too often in a row."""

    def __init__(self, message: str, *, step: str, lapses: int) -> None:
        super().__init__(message)
        self.step = step
        self.lapses = lapses


class ProcessingFailed(WaypostError):
    """Processing a run (its workflow task, or recording a step's outcome) failed several
    times in a row for a reason that is neither the workflow code's nor a store that is
    away: a write the database refuses as it is (`StoreRejected`), or a fault in the
    engine itself."""

    def __init__(self, cause: Exception, tries: int, *, doing: str = "processing the run") -> None:
        super().__init__(f"{doing} failed {tries} times in a row: {type(cause).__name__}: {cause}")
        self.cause = cause
        self.tries = tries


def suspension(err: Exception) -> tuple[dict[str, Any], str]:
    """The run's error and the `waiting_for` detail an operator reads, for `err`."""
    error: dict[str, Any]
    if isinstance(err, NondeterminismError):
        error = {"type": "NondeterminismError", "message": str(err)}
        return error, "the workflow code no longer matches the run's history"
    if isinstance(err, BrokenHistory):
        error = {"type": "BrokenHistory", "message": str(err)}
        return error, "the run's stored history fails its integrity check"
    if isinstance(err, WorkflowBug):
        at = f" at {err.site}" if err.site else ""
        detail = (
            f"the workflow code raised {err.error_type}{at}, which is not a failure: "
            "fix the code, then resume the run (or terminate it)"
        )
        return err.to_json(), detail
    if isinstance(err, PoisonRun):
        error = {"type": "PoisonRun", "message": str(err)}
        error.update(step=err.step, lapses=err.lapses)
        return error, f"{err}: find out why, then resume the run (or terminate it)"
    if isinstance(err, ProcessingFailed):
        cause = err.cause
        error = {
            "type": "ProcessingFailed",
            "message": str(err),
            "tries": err.tries,
            # Without the exceptions it was raised from: a driver's error may quote the
            # refused row, which the database would refuse again (the log has them).
            "cause": error_to_json(
                cause, traceback_text="".join(traceback.format_exception(cause, chain=False))
            ),
        }
        return error, f"{err}: find out why, then resume the run (or terminate it)"
    error = error_to_json(err, traceback_text="".join(traceback.format_exception(err)))
    return error, f"replaying the run failed: {type(err).__name__}: {err}"


class Refusals:
    """A run's work (`doing`) that fails again as it is, counted in a row: tried
    `REFUSAL_TRIES` times, then the run is suspended with the reason."""

    def __init__(self, doing: str, tenant: str, run_id: str) -> None:
        self.doing, self.where, self.count = doing, f"{tenant}/{run_id}", 0

    def failed(self, exc: Exception) -> ProcessingFailed | None:
        """Count `exc`; the reason to suspend the run for, once it is time."""
        self.count += 1
        if self.count >= REFUSAL_TRIES:
            log.error("%s (%s): the last failure", self.doing, self.where, exc_info=exc)
            return ProcessingFailed(exc, self.count, doing=self.doing)
        log.warning(
            "%s (%s) failed (try %d of %d): %s: %s",
            *(self.doing, self.where, self.count, REFUSAL_TRIES, type(exc).__name__, exc),
        )
        return None


def broken_history(
    chain: Chain, run: RunRecord, events: Sequence[Event], after: WorkflowInstance | None = None
) -> str | None:
    """Why `events` (the whole history, or those after `after`'s) cannot be trusted."""
    after_seq, prev_hash = (after.last_seq, after.last_hash) if after else (0, "")
    run_key = (run.tenant, run.run_id)
    problems = chain.verify(events, after_seq=after_seq, prev_hash=prev_hash, run=run_key)
    if problems:
        first = problems[0]
        return f"event {first.seq}: {first.problem}"
    last_seq, last_hash = (events[-1].seq, events[-1].hash) if events else (after_seq, prev_hash)
    if (run.last_seq, run.last_hash) != (last_seq, last_hash):
        return "the run's snapshot does not point at the last event of its history"
    return None


def poisoned_workflow_task(task: ClaimedTask) -> PoisonRun:
    return PoisonRun(
        f"the run's workflow task lost its engine {task.lapses} times in a row (the process "
        "died or stopped renewing the lease while running the workflow code)",
        step="workflow task",
        lapses=task.lapses,
    )


class _Host(Protocol):
    @property
    def store(self) -> Store: ...

    async def commit(self, commit: RunCommit) -> CommitResult: ...


async def suspend_run(host: _Host, run: RunRecord, fence: int, err: Exception, now: float) -> bool:
    """Suspend the run, holding its workflow task under `fence`; False if something
    was appended meanwhile."""
    error, detail = suspension(err)
    same = isinstance(run.error, dict) and run.error.get("message") == error["message"]
    if run.status == RunStatus.SUSPENDED and same:
        events: list[NewEvent] = []
    else:
        at = f" at {error['site']}" if error.get("site") else ""
        kind = error.get("type", "an error")
        message = error["message"]
        log.error("suspending run %s/%s: %s%s: %s", run.tenant, run.run_id, kind, at, message)
        events = [RunSuspended(error=error).at(now)]
    res = await host.commit(
        RunCommit(
            tenant=run.tenant,
            run_id=run.run_id,
            events=events,
            now=now,
            expect_seq=run.last_seq,
            expect_hash=run.last_hash,
            workflow_fence=fence,
            workflow_op=WorkflowTaskOp.IDLE,
            snapshot=Snapshot(
                RunStatus.SUSPENDED.value,
                [{"kind": "operator", "detail": detail}],
                run.processed_seq,
                error=error,
            ),
        )
    )
    return res.conflict is not Conflict.SEQ


def _finished(status: str) -> bool:
    """Whether a run's status says it ended (one that is not a status does not)."""
    return status in _FINISHED


async def suspend_latest(
    host: _Host, tenant: str, run_id: str, suspend: Callable[[RunRecord], Awaitable[bool]]
) -> None:
    """`suspend` the run as it is now, reading it again while something is appended
    meanwhile; nothing if it is gone or has ended. Its row is read even if it fails its
    checks (`BrokenRecord` may be why it is suspended): the suspension writes the row
    anew from what the engine knows, never returning what it held."""
    for _ in range(8):
        run = await host.store.get_run(tenant, run_id, checked=False)
        if run is None or _finished(run.status):
            return
        if await suspend(run):
            return


async def hold_poisoned_step(
    host: _Host,
    a: Attempt,
    outcome: Outcome,
    now: float,
    late: Callable[[Attempt, Outcome], Awaitable[None]],
    refused: ProcessingFailed | None = None,
) -> None:
    """Suspend the run of an attempt that lost its engine once too often (its step's
    `outcome.lapses`-th lapse, or its retry policy's last attempt), or whose outcome
    could not be recorded (`refused`: the outcome is not kept, the step runs again).

    The step is not failed: its ActivityFailed says it is retried, its task is made ready
    again, and no attempt starts while the run is suspended; `resume` lets it run again.
    """
    err: Exception
    if refused is not None:
        err = refused
        error, detail = suspension(err)
        failure: dict[str, Any] | None = {"type": "ProcessingFailed", "message": str(refused)}
    else:
        err = PoisonRun(
            f"step {a.step} (activity {a.activity}) lost its engine {outcome.lapses} "
            f"time{'s' if outcome.lapses != 1 else ''}: its attempts' process died or "
            "stopped renewing the lease",
            step=a.step,
            lapses=outcome.lapses,
        )
        error, detail = suspension(err)
        failure = outcome.error
    held = ActivityFailed(
        step=a.step, attempt=a.attempt, error=failure, retrying=True, held="the run is suspended"
    ).at(now)
    for _ in range(8):
        run = await host.store.get_run(a.tenant, a.run_id, checked=False)
        if run is None:
            return
        res = await host.commit(
            RunCommit(
                tenant=a.tenant,
                run_id=a.run_id,
                events=[
                    held,
                    RunSuspended(error=error).at(now),
                ],
                now=now,
                expect_seq=run.last_seq,
                expect_hash=run.last_hash,
                effects=(
                    SettleActivity(
                        a.step,
                        a.fence,
                        ActivityTaskOp.RETRY,
                        now,
                        outcome.heartbeat_details,
                        lapsed=refused is None,
                    ),
                ),
                snapshot=Snapshot(
                    RunStatus.SUSPENDED.value,
                    [{"kind": "operator", "detail": detail}],
                    run.processed_seq,
                    error=error,
                ),
            )
        )
        if res.conflict is Conflict.ACTIVITY_FENCE:
            await late(a, outcome)
            return
        if res.conflict is not Conflict.SEQ:
            return
