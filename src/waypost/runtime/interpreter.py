"""Runs workflows defined as data: one deterministic interpreter for every definition.

A definition run is an ordinary workflow run whose code is this interpreter,
bound to the definition version(s) the run's history names. It keeps the
run's data (its input plus what steps store at their `output` locations),
walks the steps, and does every side effect through the workflow context, so
replay, leases, retries, timers and approvals behave as for code workflows.

- An `activity` step schedules the registered activity with the step's input
  mapping as keyword arguments; an `http` step schedules the built-in
  `waypost.http` activity. The step's retry policy and timeout travel in the
  scheduled event; an activity no process here registers is still scheduled
  (a worker elsewhere may serve it).
- A step that ends the run badly (a `fail` step, an activity that failed for
  good, a rejection or expiry without `on_reject`/`on_expiry`, a wait that
  timed out without `on_timeout`, a choice passed more than `max_iterations`
  times, an expression that cannot be evaluated or goes over its budget, the
  definition's total `timeout` or the tenant's maximum run time) first runs
  the compensations of the activity steps that completed, newest first, each
  recorded as an activity of its own; then the run fails with the error's
  name as its type.
- A cancelled run ends `cancelled`. With `on_cancel: compensate` it first
  runs the same compensations, newest first, and its RunCancelled (and its
  error's `details`) says what was `compensated` and what
  `compensation_failed`. A cancel that comes while a failure is being
  compensated stops that compensation; with `on_cancel: compensate` the rest
  are still run, and the interrupted one is listed as failed.
- What the tenant's `Limits` allow a run (its maximum run time, the budget of
  each expression and of all its expressions together) is what its RunStarted
  recorded (`definition.limits`), never the limits in force when it replays: a
  replay must decide as the first execution did, and a tenant's limits may
  change in between. Runs started before RunStarted recorded limits have no
  maximum run time beyond their own `timeout` (adding a timer would change
  their history) and evaluate with the default budget: an expression over it
  would have stalled the engine. Runs started before it recorded the run's
  totals have none.
- A `parallel` step runs each branch in its own task on a copy of the data;
  when all have ended, each branch's writes are copied back by path, in the
  order of the branches: a branch that stored at `$.order.payment` brings
  back `order.payment`, and another that stored at `$.order.shipping` keeps
  its field too. Publishing refuses branches that write overlapping paths, so
  the order never decides a value. Runs that joined before this rule (their
  history has no `join-by-paths` patch marker) keep the old one on replay:
  the top-level fields each branch changed, a later branch winning. The first
  branch to fail cancels the others.
- A RunMigrated event (written by `engine.migrate`) arrives while the run
  waits at a top-level step: the interpreter withdraws the step's open
  approval, stops the wait, and goes on at the mapped step of the new version.
- What each step type does is in its own module under `steps/`, found through the
  table `steps.STEP_TYPES`; the interpreter walks from step to step, dispatches each
  through that table, and keeps the run's data, deadline, migrations and
  compensations (it is the `steps.Walk` every handler is given).
- `catch` routes a failure of its step by name, after the step's retries: the
  interpreter's error name (`activity_failed`, `timeout`, ...) or the error
  type the activity (or the called run) failed with, or `*`. The error is
  stored at the rule's `output` (`$.error`) as `{error, type, message, step}`
  and the walk goes on at its `next`; nothing is compensated. The run's own
  deadline is not a failure of a step: it cannot be caught.
- `result` selects what a step stores at `output`: an expression or a mapping
  evaluated with the step's raw result as its data.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Mapping
from typing import TYPE_CHECKING, Any

from waypost.errors import (
    ActivityError,
    Failure,
    NondeterminismError,
    WorkflowError,
)
from waypost.model import approvals as ap
from waypost.model.definitions import Definition
from waypost.model.definitions.expressions import (
    DEFAULT_BUDGET,
    Budget,
    ExpressionError,
    Meter,
    assign,
    evaluate_mapping,
    parse_output_path,
)
from waypost.model.definitions.format import describe_duration
from waypost.model.definitions.validate import DEFAULT_ERROR_OUTPUT

from .context import ContextHost, instance_of
from .steps import STEP_TYPES, StepFailure, expression_failure
from .steps.activity import HTTP_ACTIVITY
from .steps.call import DEFINITIONS_QUEUE
from .steps.parallel import JOIN_BY_PATHS

if TYPE_CHECKING:
    from .context import WorkflowContext

__all__ = [
    "DEFINITIONS_QUEUE",
    "HTTP_ACTIVITY",
    "JOIN_BY_PATHS",
    "DefinitionFailed",
    "Interpreter",
    "StepFailure",
]


class DefinitionFailed(Failure):
    """A definition run failed (a business failure); `error_type` is the error's name
    (`rejected`, ...)."""

    def __init__(self, error: str, message: str, details: dict[str, Any]) -> None:
        super().__init__(message, type=error, details=details)


class Interpreter:
    """The code of one definition run. `definitions` holds every version the run uses."""

    def __init__(
        self,
        definitions: Mapping[int, Definition],
        version: int,
        limits: Mapping[str, Any] | None = None,
    ) -> None:
        self.definitions = dict(definitions)
        self.version = version
        recorded = dict(limits or {})
        self.limits = recorded  # a `call` step's child runs under the same
        self.budget = (
            Budget(int(recorded["max_expression_steps"]), int(recorded["max_expression_size"]))
            if "max_expression_steps" in recorded and "max_expression_size" in recorded
            else DEFAULT_BUDGET
        )
        # All of the run's evaluations together: runs started before RunStarted recorded
        # these totals have none (as they had none when they ran first).
        self.meter = (
            Meter(
                int(recorded["max_run_expression_steps"]), int(recorded["max_run_expression_size"])
            )
            if "max_run_expression_steps" in recorded and "max_run_expression_size" in recorded
            else None
        )
        self.max_run_seconds: float | None = (
            float(recorded["max_run_seconds"]) if "max_run_seconds" in recorded else None
        )
        self.data: dict[str, Any] = {}
        self.position: dict[str, str] = {}
        """Where each walk is: "" for the top level, "<parallel step>[i]/" for a branch."""
        self.waiting = False
        """Whether the top-level walk is blocked in an approval or wait step."""
        self.compensations: list[dict[str, Any]] = []
        self._undone: list[str] = []  # steps compensated, in order
        self._undo_failed: list[dict[str, Any]] = []
        self._undoing: dict[str, Any] | None = None  # the compensation running now
        self.iterations: dict[str, int] = {}
        self._ctx: WorkflowContext | None = None
        self._walk: asyncio.Task[Any] | None = None
        self._migration: dict[str, Any] | None = None
        self._timed_out: str | None = None  # the step the run was at when its time ran out
        # The output paths stored into each walk's data (by the id of that dict), in order.
        self._writes: dict[int, list[tuple[str, ...]]] = {}

    @property
    def definition(self) -> Definition:
        return self.definitions[self.version]

    @property
    def ctx(self) -> WorkflowContext:
        assert self._ctx is not None
        return self._ctx

    @property
    def inst(self) -> ContextHost:
        return instance_of(self.ctx)

    # == the run ================================================================
    async def run(self, ctx: WorkflowContext, input: Any) -> Any:
        self._ctx = ctx
        instance_of(ctx).on_migrate(self._on_migrated)
        instance_of(ctx).repairs.on_input_updated(self._on_input_updated)
        self.data = self._initial_data(input)
        ctx.set_query("data", lambda: self.data)  # the run's data, as it is now
        deadline: asyncio.Future[None] | None = None
        limit = self._time_limit()
        if limit is not None:
            instance_of(ctx).label_sites(f"{self.definition.name} v{self.version} timeout")
            deadline = ctx.sleep(limit[0])
            deadline.add_done_callback(self._on_deadline)
        step_id: str | None = self.definition.start
        try:
            try:
                while True:
                    self._walk = asyncio.get_running_loop().create_task(
                        self.walk_from(step_id, self.data, "")
                    )
                    try:
                        return await self._walk
                    except asyncio.CancelledError:
                        this = asyncio.current_task()
                        if this is not None and this.cancelling():
                            raise  # the run itself is being cancelled
                        if self._timed_out is not None and limit is not None:
                            seconds, error, what = limit
                            raise StepFailure(
                                error,
                                f"the run did not finish within {what} of "
                                f"{describe_duration(seconds)} "
                                f"(it was at step {self._timed_out!r})",
                                self._timed_out,
                            ) from None
                        if self._migration is None:
                            raise
                        moved, self._migration = self._migration, None
                        self.version = int(moved["to_version"])
                        step_id = str(moved["to_step"])
            except StepFailure as failure:
                details = await self._compensate(failure)
                raise DefinitionFailed(failure.error, failure.message, details) from None
        except asyncio.CancelledError:
            if ctx.cancel_requested and self.definition.on_cancel == "compensate":
                await self._compensate_cancelled()
            raise
        finally:
            if deadline is not None and not deadline.done():
                deadline.cancel()

    def _time_limit(self) -> tuple[float, str, str] | None:
        """(seconds, error type, what it is) of the run's deadline, if it has one."""
        own = self.definition.timeout
        ceiling = self.max_run_seconds
        if ceiling is not None and (own is None or ceiling < own):
            return ceiling, "run_time_limit", "the maximum run time of its tenant"
        if own is not None:
            return own, "timeout", "its timeout"
        return None

    def _initial_data(self, input: Any) -> dict[str, Any]:
        data = dict(input) if isinstance(input, Mapping) else {}
        schema = self.definition.input_schema
        if isinstance(schema, Mapping):
            for name, prop in (schema.get("properties") or {}).items():
                if name not in data and isinstance(prop, Mapping) and "default" in prop:
                    data[name] = prop["default"]
        return data

    def _on_deadline(self, fut: asyncio.Future[None]) -> None:
        if fut.cancelled() or self._walk is None or self._walk.done():
            return
        self._timed_out = self.position.get("", "")
        self._walk.cancel()

    def _on_migrated(self, event: Mapping[str, Any]) -> None:
        at = self.position.get("")
        if at != event.get("from_step") or len(self.position) != 1 or not self.waiting:
            raise NondeterminismError(
                f"the run was migrated from step {event.get('from_step')!r}, but its "
                f"definition run is at {at!r}"
            )
        version = int(event["to_version"])
        if version not in self.definitions:
            raise WorkflowError(f"definition version {version} of the run is not loaded")
        assert self._ctx is not None
        assert self._walk is not None
        self.inst.approvals.withdraw_approvals(ap.REVOKED)
        self._migration = dict(event)
        self._walk.cancel()

    def _on_input_updated(self, event: Mapping[str, Any]) -> None:
        """An operator replaced fields of the run's data while it waited (update-input):
        the next steps read the new values; replay applies them at the same event."""
        if len(self.position) != 1 or not self.waiting:
            raise NondeterminismError(
                "the run's data was updated, but its definition run is not waiting at a "
                f"top-level step (it is at {sorted(self.position.values())})"
            )
        self.data.update(dict(event["new"]))

    # == walking ================================================================
    async def walk_from(self, step_id: str | None, data: dict[str, Any], path: str) -> Any:
        """Run steps from `step_id` until one ends the walk; the run's result at top level."""
        try:
            while step_id is not None:
                self.position[path] = step_id
                self._label(step_id)
                step = self.definition.all_steps[step_id]
                kind = step["type"]
                if kind == "succeed":
                    if "output" in step:
                        return self.evaluate(step["output"], data, step_id, "output")
                    return data
                if kind == "fail":
                    raise StepFailure(
                        step["error"],
                        step.get("message") or f"the run failed at step {step_id!r}",
                        step_id,
                    )
                step_id = await self.take_step(step_id, step, data, path)
            return data
        finally:
            self.position.pop(path, None)

    async def take_step(
        self, step_id: str, step: Mapping[str, Any], data: dict[str, Any], path: str
    ) -> str | None:
        """Carry out one step (not `succeed` or `fail`) of the walk at `path`; the next
        step, None to end the walk. A failure its `catch` names goes where it says."""
        handler = STEP_TYPES.get(step["type"])
        if handler is None:  # validation makes this unreachable
            raise WorkflowError(f"step {step_id!r} has unknown type {step['type']!r}")
        try:
            return await handler(self, step_id, step, data, path)
        except StepFailure as failure:
            for rule in step.get("catch", ()):
                names = rule["errors"]
                if "*" in names or failure.error in names or failure.type in names:
                    where = parse_output_path(rule.get("output", DEFAULT_ERROR_OUTPUT))
                    self.assign(data, where, failure.described())
                    caught: str = rule["next"]
                    return caught
            raise

    def _label(self, step_id: str) -> None:
        """Name the definition step in the history's `site` fields (what code has as file:line)."""
        assert self._ctx is not None
        label = f"{self.definition.name} v{self.version} step {step_id}"
        self.inst.label_sites(label)

    async def _call(
        self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], spec: Any
    ) -> Any:
        assert self._ctx is not None
        return await self.inst.schedule_activity(name, args, kwargs, spec)

    # == what the step handlers use (steps.Walk) ===============================
    async def waiting_in(self, step: Awaitable[str | None], path: str) -> str | None:
        self.waiting = path == ""
        try:
            result: str | None = await step
            return result
        finally:
            self.waiting = False

    def evaluate(self, text: str, data: Any, step: str, where: str) -> Any:
        """The value of one of the definition's expressions over `data`; a failure of
        `step` (expression_failed) if it cannot be evaluated or goes over its budget."""
        try:
            return self.definition.expression(text).evaluate(data, self.budget, self.meter)
        except ExpressionError as exc:
            raise expression_failure(exc, step, where) from None

    def holds(self, text: str, data: Any, step: str, where: str) -> bool:
        try:
            return self.definition.expression(text).holds(data, self.budget, self.meter)
        except ExpressionError as exc:
            raise expression_failure(exc, step, where) from None

    def mapping(
        self, mapping: Mapping[str, Any] | None, data: Any, step: str, where: str
    ) -> dict[str, Any]:
        if not mapping:
            return {}
        try:
            return evaluate_mapping(mapping, data, self.budget, self.meter)
        except ExpressionError as exc:
            raise expression_failure(exc, step, where) from None

    def store(
        self, step_id: str, step: Mapping[str, Any], data: dict[str, Any], value: Any
    ) -> None:
        """Store a step's result at its `output`, as its `result` selects it."""
        location = step.get("output")
        if not location:
            return
        selected = step.get("result")
        if isinstance(selected, Mapping):
            value = self.mapping(selected, value, step_id, "result")
        elif selected is not None:
            value = self.evaluate(selected, value, step_id, "result")
        self.assign(data, parse_output_path(location), value)

    def assign(self, data: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
        """Store `value` at `path` in a walk's data (in place), remembering the write."""
        updated = assign(data, "$." + ".".join(path), value)
        data.clear()
        data.update(updated)
        writes = self._writes.get(id(data))
        if writes is not None:  # the data of a parallel branch
            writes.append(path)

    def track_writes(self, data: dict[str, Any]) -> None:
        self._writes[id(data)] = []

    def writes(self, data: dict[str, Any]) -> list[tuple[str, ...]]:
        return self._writes.get(id(data), [])

    def forget_writes(self, data: dict[str, Any]) -> list[tuple[str, ...]]:
        return self._writes.pop(id(data), [])

    def count_pass(self, step_id: str) -> int:
        passes = self.iterations.get(step_id, 0) + 1
        self.iterations[step_id] = passes
        return passes

    def add_compensation(self, entry: dict[str, Any]) -> None:
        self.compensations.append(entry)

    # == compensation ===========================================================
    async def _compensate(self, failure: StepFailure) -> dict[str, Any]:
        """Undo completed steps newest first; what was undone (and what could not be)."""
        details: dict[str, Any] = {"step": failure.step, "version": self.version}
        await self._undo()
        details.update(self._undo_report())
        return details

    async def _compensate_cancelled(self) -> None:
        """The run is cancelled and its definition says `on_cancel: compensate`: undo the
        completed steps newest first, telling the instance as it goes (a run that the
        cancel grace ends meanwhile reports what was done by then)."""
        interrupted = self._undoing
        if interrupted is not None:  # the cancel came while a failure was compensating
            self._undoing = None
            message = "interrupted: the run was cancelled while the compensation ran"
            self._undo_failed.append({"step": interrupted["step"], "message": message})
        self.inst.cancellation.report(self._undo_report(full=True))
        await self._undo(report=True)

    async def _undo(self, report: bool = False) -> None:
        while self.compensations:
            entry = self._undoing = self.compensations.pop()
            spec = {
                "compensates": entry["step"],
                "definition_version": entry["version"],
            }
            self._label(f"{entry['step']} (compensation)")
            try:
                await self._call(entry["activity"], (), entry["input"], spec)
            except ActivityError as exc:
                self._undo_failed.append(
                    {"step": entry["step"], "message": exc.error.get("message") or str(exc)}
                )
            else:
                self._undone.append(entry["step"])
            self._undoing = None
            if report:
                self.inst.cancellation.report(self._undo_report(full=True))

    def _undo_report(self, full: bool = False) -> dict[str, Any]:
        """What the compensations undid (`compensated`) and what they could not (`full`:
        both lists, even empty, as a cancelled run reports them)."""
        details: dict[str, Any] = {}
        if self._undone or full:
            details["compensated"] = list(self._undone)
        if self._undo_failed or full:
            details["compensation_failed"] = list(self._undo_failed)
        return details


def definition_of(fn: Any) -> Interpreter | None:
    """The interpreter behind a workflow function, if it is one."""
    owner = getattr(fn, "__self__", None)
    return owner if isinstance(owner, Interpreter) else None
