"""Operator commands: terminate, pause and resume a run.

Each appends one event naming who, why, and the run's status before and after
(`RunTerminated`, `RunPaused`, `RunResumed`), with the snapshot it implies, in one
commit conditioned on the run's last event: a change that races another is decided
again on the state it lost to. The snapshot is never edited on its own.

- Terminate ends the run `terminated` at once: no code runs (no compensation), its
  tasks and timers are deleted and its approvals' credentials revoked in the same
  commit. An attempt still running reports into a run that has no task for it: its
  result is kept as `LateResultIgnored`.
- Pause sets the run `paused`. The runner does not process a paused run's workflow
  task (it parks it idle) and no activity task of a paused run is claimed. Signals,
  fired timers and results of attempts already running are appended as usual and wait
  in the history.
- Resume sets it `running` and wakes its workflow task: the code takes in what waited.
  A suspended run (a bug in its code, a mismatch with its history, a poison run) is
  resumed the same way once the code is fixed: the engine drops any instance it keeps
  and replays the run with the code it has now; if that still fails, the run is
  suspended again with the new error.
"""

from __future__ import annotations

from typing import Any

from waypost.engine.ports import Machinery
from waypost.errors import InvalidState, RunNotActive
from waypost.model import operations as ops
from waypost.model.events import EventData, EventType, RunPaused, RunResumed, RunTerminated
from waypost.model.identity import Principal, preview
from waypost.model.requests import handles
from waypost.model.status import RunStatus
from waypost.store.base import CommitResult, Conflict, RunCommit, RunRecord, Snapshot
from waypost.store.effects import RESET_LAPSES, CloseRunApprovals, Effect

from .runs import run_not_found

_E = EventType
_TRIES = 20
# What a resumed run no longer waits for: the operator.
_HELD = ("paused", "operator")
PAUSED_WAIT = {"kind": "paused", "detail": "paused by an operator: nothing runs until resumed"}


class OperatorCommands:
    """Terminate, pause and resume, for one engine."""

    def __init__(self, machinery: Machinery) -> None:
        self.machinery = machinery

    @handles(ops.Terminate)
    async def terminate(self, req: ops.Terminate, principal: Principal) -> None:
        """End the run now, `terminated`; nothing of its code runs again."""

        def change(run: RunRecord, data: dict[str, Any], now: float) -> RunCommit:
            return operator_commit(
                run,
                RunTerminated(**data),
                now,
                Snapshot(
                    RunStatus.TERMINATED.value,
                    [],
                    run.processed_seq,
                    error={"type": "Terminated", "message": req.reason},
                    finished=True,
                ),
                (CloseRunApprovals("cancelled"),),
            )

        await self._change(req.run_id, req.reason, principal, "terminate", None, change)
        m = self.machinery
        m.forget(principal.tenant, req.run_id)
        m.run_ended(principal.tenant, req.run_id)

    @handles(ops.Pause)
    async def pause(self, req: ops.Pause, principal: Principal) -> None:
        """Hold the run: no new work starts until it is resumed."""

        def change(run: RunRecord, data: dict[str, Any], now: float) -> RunCommit:
            waiting = [PAUSED_WAIT, *(w for w in run.waiting_for if w.get("kind") != "paused")]
            snap = Snapshot(RunStatus.PAUSED.value, waiting, run.processed_seq)
            return operator_commit(run, RunPaused(**data), now, snap)

        def allowed(status: RunStatus) -> str | None:
            if status is RunStatus.PAUSED:
                return "it is already paused"
            if status is RunStatus.SUSPENDED:
                return (
                    "it is suspended (its code cannot run); resume it after a fix, or terminate it"
                )
            if status is RunStatus.ENQUEUED:
                return "it is enqueued (nothing of it runs yet); cancel or terminate it"
            return None

        await self._change(req.run_id, req.reason, principal, "pause", allowed, change)

    @handles(ops.Resume)
    async def resume(self, req: ops.Resume, principal: Principal) -> None:
        """Let a paused run go on (what arrived while paused is taken in now), or a
        suspended one replay with the code the engine has now."""

        def change(run: RunRecord, data: dict[str, Any], now: float) -> RunCommit:
            waiting = [w for w in run.waiting_for if w.get("kind") not in _HELD]
            # The error of a suspension stays in its RunSuspended event.
            snap = Snapshot(RunStatus.RUNNING.value, waiting, run.processed_seq)
            # A suspended run's lapses are counted afresh.
            reset = (RESET_LAPSES,) if run.status == RunStatus.SUSPENDED else ()
            return self.machinery.waking(operator_commit(run, RunResumed(**data), now, snap, reset))

        def allowed(status: RunStatus) -> str | None:
            if status in (RunStatus.PAUSED, RunStatus.SUSPENDED):
                return None
            return f"it is neither paused nor suspended (it is {status})"

        m = self.machinery
        m.forget(principal.tenant, req.run_id)  # replay with the code the engine has now
        res = await self._change(req.run_id, req.reason, principal, "resume", allowed, change)
        m.forget(principal.tenant, req.run_id)
        m.woken(principal.tenant, req.run_id, res)
        m.wake_scheduler()  # activity tasks held while the run was suspended may start now

    async def _change(
        self,
        run_id: str,
        reason: str,
        principal: Principal,
        what: str,
        allowed: Any,
        change: Any,
    ) -> CommitResult:
        m = self.machinery
        tenant = principal.tenant
        for _ in range(_TRIES):
            run = await m.store.get_run(tenant, run_id)
            if run is None:
                raise run_not_found(run_id, tenant)
            status = RunStatus(run.status)
            if status.finished:
                raise RunNotActive(f"cannot {what}: run {preview(run_id)} has finished ({status})")
            refused = allowed(status) if allowed is not None else None
            if refused is not None:
                raise InvalidState(f"cannot {what} run {preview(run_id)}: {refused}")
            now = m.settings.clock()
            after = {"terminate": "terminated", "pause": "paused", "resume": "running"}[what]
            data = {
                "by": principal.subject,
                "reason": reason,
                "status_before": status.value,
                "status_after": after,
            }
            res = await m.commit(change(run, data, now))
            if res.ok:
                return res
            if res.conflict is Conflict.RUN_NOT_FOUND:
                raise run_not_found(run_id, tenant)
            # Conflict.SEQ: something else happened to the run first; judge again.
        raise InvalidState(f"cannot {what} run {preview(run_id)}: it keeps changing; try again")


def operator_commit(
    run: RunRecord,
    event: EventData,
    now: float,
    snapshot: Snapshot | None = None,
    effects: tuple[Effect, ...] = (),
) -> RunCommit:
    """One operator event appended to `run`, conditioned on its last event (a change that
    raced another is refused and judged again), with the snapshot it implies, if any, and
    its `effects`."""
    return RunCommit(
        tenant=run.tenant,
        run_id=run.run_id,
        events=[event.at(now)],
        now=now,
        expect_seq=run.last_seq,
        expect_hash=run.last_hash,
        snapshot=snapshot,
        effects=effects,
    )
