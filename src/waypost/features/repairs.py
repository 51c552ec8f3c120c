"""Repair commands: retry a failed step, skip a step, update a waiting run's data.

Each appends one event naming who, why, and the run's status before and after, with
the rows it implies, in one commit conditioned on the run's last event (a change that
races another is judged again on the state it lost to). Nothing is deleted from the
history: a repair's event names in `voids` the events that no longer count
(`waypost.model.repairs`), and replay leaves those out.

- Retry (`RunRetried`): a run that failed because one activity step failed for good,
  and whose code did nothing more about it (no compensation ran), goes back to
  `running`. The step's final failure and `RunFailed` are voided; the same commit
  makes the run's workflow task again and a fresh task for the step, whose attempt
  numbering goes on and whose retry policy starts a fresh round. Replay reaches the
  step with no result, so earlier steps are not run again.
- Skip (`StepSkipped`): the step's awaiting call returns the output given. A failed
  step of a failed run is skipped as retry re-runs it (the run goes on); a step still
  waiting or running has its task removed, so a late result of its attempt is kept as
  audit only. A definition step marked `skippable: true` needs `operator`; any other
  step `admin`.
- Update-input (`InputUpdated`): a definition run waiting at a top-level approval or
  wait step gets fields of its data replaced (the old and new values recorded); the
  interpreter applies them when it takes in the event, live or in replay alike.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any

from waypost.engine.ports import Machinery
from waypost.errors import (
    ComputeLimitExceeded,
    InvalidRequest,
    InvalidState,
    PermissionDenied,
    QuotaExceeded,
    RunNotActive,
)
from waypost.model import operations as ops
from waypost.model.definitions import InputError, input_problems
from waypost.model.events import (
    Event,
    EventData,
    EventType,
    InputUpdated,
    RunRetried,
    StepSkipped,
)
from waypost.model.identity import Principal, Role, preview
from waypost.model.repairs import (
    FailedStep,
    OpenStep,
    effective,
    failed_step,
    find_step,
    open_steps,
    open_work,
)
from waypost.model.requests import handles
from waypost.model.retry import Retry
from waypost.model.status import RunStatus
from waypost.runtime.interpreter import DEFINITIONS_QUEUE, Interpreter, definition_of
from waypost.runtime.registry import workflow_queue
from waypost.store.base import (
    Conflict,
    NewActivityTask,
    NewCorrelation,
    NewTimer,
    RunCommit,
    RunRecord,
    Snapshot,
)
from waypost.store.effects import (
    DropActivities,
    Effect,
    OpenCorrelations,
    ReopenQueue,
    ScheduleActivities,
    StartTimers,
)

from .definitions import Definitions
from .operator import operator_commit
from .runs import run_not_found

_E = EventType
_TRIES = 20
Change = Callable[[RunRecord, list[Event], RunStatus], Awaitable[RunCommit]]


class Repairs:
    """Retry, skip and update-input, for one engine."""

    def __init__(self, machinery: Machinery, definitions: Definitions) -> None:
        self.machinery = machinery
        self.definitions = definitions

    # == retry ==================================================================
    @handles(ops.Retry)
    async def retry(self, req: ops.Retry, principal: Principal) -> None:
        """Re-run the failed step of a failed run; the run goes back to `running`."""

        async def change(run: RunRecord, history: list[Event], status: RunStatus) -> RunCommit:
            found = _failed(run, history, status, "retry", req.step)
            said = self._said(principal, req.reason, status, RunStatus.RUNNING)
            retried = RunRetried(
                **said, step=found.step, attempt=found.attempts + 1, voids=found.voids
            )
            return self._reopen(run, history, found, retried, task=True)

        await self._change(req.run_id, principal, "retry", change)

    # == skip ===================================================================
    @handles(ops.Skip)
    async def skip(self, req: ops.Skip, principal: Principal) -> None:
        """Mark a step skipped: its awaiting call returns `req.output`."""
        m = self.machinery
        output = m.codec.encode(req.output)
        await self.definitions.bounded(principal.tenant, "skip's output", output)

        async def change(run: RunRecord, history: list[Event], status: RunStatus) -> RunCommit:
            target: FailedStep | OpenStep
            if status is RunStatus.FAILED:
                target = _failed(run, history, status, "skip", req.step)
            else:
                target = _open(run, history, status, req.step)
            if Role.ADMIN not in principal.roles and not await self._skippable(
                run, history, target
            ):
                raise PermissionDenied(
                    f"skipping step {preview(req.step)} needs the admin role: it is not a "
                    "definition step marked `skippable`"
                )
            self._decodes(output, target.activity)
            after = RunStatus.RUNNING if status is RunStatus.FAILED else status
            said = self._said(principal, req.reason, status, after)
            skipped = StepSkipped(
                **said,
                step=target.step,
                activity=target.activity,
                output=output,
                voids=target.voids if isinstance(target, FailedStep) else None,
            )
            if isinstance(target, FailedStep):
                return self._reopen(run, history, target, skipped, task=False)
            dropped = (DropActivities([target.step]),)
            return m.waking(operator_commit(run, skipped, m.settings.clock(), None, dropped))

        await self._change(req.run_id, principal, "skip", change)

    def _decodes(self, output: Any, activity: str) -> None:
        """Refuse an output the awaiting code could not take as the activity's result."""
        m = self.machinery
        defn = m.registry.activities().get(activity)
        if defn is None:
            return  # served elsewhere: its code decides
        try:
            m.codec.decode(output, defn.result_hint)
        except Exception as exc:
            raise InvalidRequest(
                f"skip's output is not a result of activity {preview(activity)}: "
                f"{preview(str(exc))}",
                field="output",
            ) from None

    async def _skippable(
        self, run: RunRecord, history: list[Event], target: FailedStep | OpenStep
    ) -> bool:
        name = target.scheduled.data.get("definition_step")
        if name is None or "definition" not in history[0].data:
            return False  # a step of workflow code, or a compensation
        interpreter = await self._interpreter(run, history)
        version = int(target.scheduled.data.get("definition_version") or interpreter.version)
        definition = interpreter.definitions.get(version)
        step = definition.all_steps.get(str(name)) if definition is not None else None
        return bool(step is not None and step.get("skippable"))

    # == update-input ============================================================
    @handles(ops.UpdateInput)
    async def update_input(self, req: ops.UpdateInput, principal: Principal) -> None:
        """Replace fields of a waiting definition run's data (old and new recorded)."""
        m = self.machinery
        tenant = principal.tenant
        new = m.codec.encode(dict(req.data or {}))  # JSON only (no NaN, string keys)
        await self.definitions.bounded(tenant, "update-input's data", new)

        async def change(run: RunRecord, history: list[Event], status: RunStatus) -> RunCommit:
            if "definition" not in history[0].data:
                raise InvalidState(
                    f"cannot update the input of run {preview(run.run_id)}: it runs workflow "
                    "code, whose data lives in its code; fork it or signal it instead"
                )
            if status is not RunStatus.WAITING:
                raise InvalidState(
                    f"cannot update the input of run {preview(run.run_id)}: it is not waiting "
                    f"at an approval or wait step (it is {status})"
                )
            interpreter = await self._replayed(run, history)
            definition = interpreter.definition
            candidate = {**(run.input if isinstance(run.input, dict) else {}), **new}
            problems = input_problems(definition, candidate, self.definitions.limits_for(tenant))
            if problems:
                raise InputError(definition.name, problems)
            updated = InputUpdated(
                **self._said(principal, req.reason, status, status),
                step=interpreter.position.get("", ""),
                old={name: interpreter.data[name] for name in new if name in interpreter.data},
                new=new,
            )
            return m.waking(operator_commit(run, updated, m.settings.clock()))

        await self._change(req.run_id, principal, "update the input of", change, failed=False)

    async def _interpreter(self, run: RunRecord, history: list[Event]) -> Interpreter:
        defn = await self.definitions.workflow(run, history)
        interpreter = definition_of(defn.fn)
        assert interpreter is not None  # a definition run's code is always one
        return interpreter

    async def _replayed(self, run: RunRecord, history: list[Event]) -> Interpreter:
        """The run's interpreter with its history replayed: where it waits, its data."""
        defn = await self.definitions.workflow(run, history)
        interpreter = definition_of(defn.fn)
        assert interpreter is not None  # a definition run's code is always one
        inst = self.machinery.new_instance(defn, run.tenant, run.run_id)
        replay = functools.partial(inst.replay, history, run.processed_seq)
        try:
            await self.machinery.compute.feed(
                inst, replay, "its replay", events=len(history), asked=True
            )
        except ComputeLimitExceeded:
            raise
        except Exception as err:
            raise InvalidState(
                f"cannot update the input of run {preview(run.run_id)}: its history does not "
                f"replay ({type(err).__name__})"
            ) from None
        finally:
            inst.close()
        if not interpreter.waiting or len(interpreter.position) != 1:
            raise InvalidState(
                f"cannot update the input of run {preview(run.run_id)}: it is not waiting at "
                "a top-level approval or wait step"
            )
        return interpreter

    # == shared ================================================================
    async def _change(
        self, run_id: str, principal: Principal, what: str, change: Change, *, failed: bool = True
    ) -> None:
        """Judge the run and commit `change`; `failed`: a failed run may be repaired."""
        m = self.machinery
        tenant = principal.tenant
        most = (await m.quotas.get(tenant)).max_events_per_run
        for _ in range(_TRIES):
            run, history = await m.store.load_run(tenant, run_id)
            if run is None or not history:
                raise run_not_found(run_id, tenant)
            status = RunStatus(run.status)
            if status.finished and not (failed and status is RunStatus.FAILED):
                raise RunNotActive(
                    f"cannot {what} run {preview(run_id)}: it has finished ({status})"
                )
            commit = await change(run, history, status)
            if most is not None and run.last_seq + len(commit.events) > most:
                # As a signal is: the commit is conditioned on the run's last event, so
                # its history's length is known here. Refusing strands nothing: the run
                # stays as it is until the quota is raised (or the run is forked).
                raise QuotaExceeded(
                    "max_events_per_run",
                    f"cannot {what} run {preview(run_id)}: its history has {run.last_seq} "
                    f"events and its tenant allows at most {most} (max_events_per_run); "
                    "raise the quota, or fork the run",
                )
            res = await m.commit(commit)
            if res.ok:
                m.forget(tenant, run_id)  # its history changed behind any cached instance
                if commit.effect(ReopenQueue) is not None:
                    m.wake_scheduler()
                else:
                    m.woken(tenant, run_id, res)
                return
            if res.conflict is Conflict.RUN_NOT_FOUND:
                raise run_not_found(run_id, tenant)
            # Conflict.SEQ: something else happened to the run first; judge again.
        raise InvalidState(f"cannot {what} run {preview(run_id)}: it keeps changing; try again")

    @staticmethod
    def _said(
        principal: Principal, reason: str, before: RunStatus, after: RunStatus
    ) -> dict[str, Any]:
        return {
            "by": principal.subject,
            "reason": reason,
            "status_before": before.value,
            "status_after": after.value,
        }

    def _reopen(
        self,
        run: RunRecord,
        history: list[Event],
        found: FailedStep,
        event: EventData,
        *,
        task: bool,
    ) -> RunCommit:
        """A failed run set going again: the repair's event, the snapshot `running`, its
        workflow task made again, and (for retry) a fresh task for the failed step."""
        now = self.machinery.settings.clock()
        site = found.scheduled.data.get("site")
        waiting = [{"kind": "activity", "step": found.step, "activity": found.activity}]
        if site:
            waiting[0]["site"] = site
        snapshot = Snapshot(RunStatus.RUNNING.value, waiting if task else [], run.processed_seq)
        definition = "definition" in history[0].data
        queue = DEFINITIONS_QUEUE if definition else workflow_queue(run.workflow, run.version)
        effects: list[Effect] = [ReopenQueue(queue)]
        # What the run's end deleted and it still waits for is made again: its open
        # activity steps (the retried one first), timers and correlated waits.
        voided = set(found.voids)
        work = open_work([ev for ev in effective(history) if ev.seq not in voided])
        tasks: list[NewActivityTask] = []
        for step in work.activities.values():
            if step.step == found.step and not task:
                continue  # skipped: the run takes the output given
            spec = dict(step.scheduled.data)
            attempts = step.attempts
            if step.step == found.step:
                attempts = found.attempts
                policy = dict(spec.get("retry") or Retry().to_json())
                # A fresh round of the step's policy; the attempt numbers go on.
                if policy.get("max_attempts", 1) is not None:  # a policy without a limit keeps none
                    policy["max_attempts"] = int(policy.get("max_attempts", 1)) + attempts
                spec["retry"] = policy
                if spec.get("schedule_to_close") is not None:  # and a fresh bound on its time
                    spec["close_by"] = now + float(spec["schedule_to_close"])
            tasks.append(
                NewActivityTask(
                    step=step.step,
                    activity=step.activity,
                    spec=spec,
                    timeout=float(spec.get("timeout", 300.0)),
                    heartbeat_timeout=spec.get("heartbeat_timeout"),
                    attempts=attempts,
                )
            )
        if tasks:
            effects.append(ScheduleActivities(tasks))
        if work.timers:
            effects.append(StartTimers([NewTimer(step, at) for step, at in work.timers.items()]))
        if work.correlations:
            waits = [
                NewCorrelation(step, signal, key, value)
                for step, (signal, key, value) in work.correlations.items()
            ]
            effects.append(OpenCorrelations(waits))
        return operator_commit(run, event, now, snapshot, tuple(effects))


def _failed(
    run: RunRecord, history: list[Event], status: RunStatus, what: str, step: str | None
) -> FailedStep:
    if status is not RunStatus.FAILED:
        raise InvalidState(
            f"cannot {what} run {preview(run.run_id)}: it has not failed (it is {status})"
        )
    found = failed_step(history)
    if isinstance(found, str):
        raise InvalidState(f"cannot {what} run {preview(run.run_id)}: {found}")
    if step is not None and find_step([found], step) is None:
        named = found.definition_step or found.step
        raise InvalidState(
            f"cannot {what} step {preview(step)} of run {preview(run.run_id)}: the step that "
            f"failed the run is {preview(named)}"
        )
    return found


def _open(run: RunRecord, history: list[Event], status: RunStatus, step: str) -> OpenStep:
    if status is RunStatus.SUSPENDED:
        raise InvalidState(
            f"cannot skip a step of run {preview(run.run_id)}: it is suspended (its code "
            "cannot run); resume it first"
        )
    steps = open_steps(history)
    found = find_step(steps.values(), step)
    if found is None:
        waiting = ", ".join(sorted(steps)[:10]) or "none"
        raise InvalidState(
            f"cannot skip step {preview(step)} of run {preview(run.run_id)}: it is not an "
            f"activity step waiting for its outcome (such steps: {waiting})"
        )
    assert isinstance(found, OpenStep)
    return found
