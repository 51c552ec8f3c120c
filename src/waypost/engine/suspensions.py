"""Why a run is suspended, in the words its snapshot and its RunSuspended event keep.

A run is suspended, never failed, when what stops it is not a business outcome:
its code no longer matches its history, its history fails its integrity check,
its code raised an exception that is not a failure (a bug), or its work keeps
killing the engines that take it (a poison run). Each waits for an operator:
`resume` after a fix, or `terminate`.
"""

from __future__ import annotations

import traceback
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from waypost.errors import BrokenHistory, NondeterminismError, WaypostError, WorkflowBug
from waypost.model.codec import error_to_json
from waypost.model.events import EventType, NewEvent
from waypost.model.status import RunStatus
from waypost.store.base import (
    ActivityTaskOp,
    ActivityUpdate,
    ClaimedTask,
    CommitResult,
    Conflict,
    RunCommit,
    Snapshot,
    Store,
)

from .attempts import Attempt, Outcome

_E = EventType


class PoisonRun(WaypostError):
    """A run's work lost its engine (the process died, the lease lapsed) too often in a row."""

    def __init__(self, message: str, *, step: str, lapses: int) -> None:
        super().__init__(message)
        self.step = step
        self.lapses = lapses


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
    error = error_to_json(err, traceback_text="".join(traceback.format_exception(err)))
    return error, f"replaying the run failed: {type(err).__name__}: {err}"


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


async def hold_poisoned_step(
    host: _Host,
    a: Attempt,
    outcome: Outcome,
    now: float,
    late: Callable[[Attempt, Outcome], Awaitable[None]],
) -> None:
    """Suspend the run of an attempt that lost its engine once too often (its step's
    `outcome.lapses`-th lapse, or its retry policy's last attempt).

    The step is not failed: its ActivityFailed says it is retried, its task is made ready
    again, and no attempt starts while the run is suspended; `resume` lets it run again.
    """
    err = PoisonRun(
        f"step {a.step} (activity {a.activity}) lost its engine {outcome.lapses} "
        f"time{'s' if outcome.lapses != 1 else ''}: its attempts' process died or stopped "
        "renewing the lease",
        step=a.step,
        lapses=outcome.lapses,
    )
    error, detail = suspension(err)
    failed = {**outcome.event_data(a), "retrying": True, "held": "the run is suspended"}
    failed.pop("retry_at", None)
    for _ in range(8):
        run = await host.store.get_run(a.tenant, a.run_id)
        if run is None:
            return
        res = await host.commit(
            RunCommit(
                tenant=a.tenant,
                run_id=a.run_id,
                events=[
                    NewEvent(_E.ACTIVITY_FAILED, failed, now),
                    NewEvent(_E.RUN_SUSPENDED, {"error": error}, now),
                ],
                now=now,
                expect_seq=run.last_seq,
                expect_hash=run.last_hash,
                activity=ActivityUpdate(
                    a.step,
                    a.fence,
                    ActivityTaskOp.RETRY,
                    now,
                    outcome.heartbeat_details,
                    lapsed=True,
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
