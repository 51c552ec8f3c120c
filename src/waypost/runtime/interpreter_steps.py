"""The steps of a definition run: what each step type does, and where a failure goes.

`InterpreterSteps` is the part of the `Interpreter` (interpreter.py) that carries
out one step of a walk; the interpreter walks from step to step, keeps the run's
deadline, migrations and compensations. See interpreter.py for the decisions
that hold for every step. Those of the steps added beside the first ones:

- A `map` step evaluates `items` (an array, at most `max_items` long, else
  `too_many_items`) and walks its `iterator` once per item, each in its own
  task on its own copy of the data with `item` and `index` added, started in
  item order with at most `concurrency` in flight. An item's task is created
  by the map's walk as its next operation, so its steps get the same ids on
  every replay whatever order the items finished in (docs/decisions/0001 and
  0021). An item's result is its `succeed` step's `output` when it ends at
  one that has it, else an object of what its steps stored. Results are
  stored at `output` in item order. A failed item fails the step and
  cancels the items in flight, unless `tolerate` allows it: its place then
  holds its error. Failures are counted in the order the items failed, which
  is the history's order, so replay decides alike.
- `catch` routes a failure of its step by name, after the step's retries: the
  interpreter's error name (`activity_failed`, `timeout`, ...) or the error
  type the activity (or the called run) failed with, or `*`. The error is
  stored at the rule's `output` (`$.error`) as `{error, type, message, step}`
  and the walk goes on at its `next`; nothing is compensated. The run's own
  deadline is not a failure of a step: it cannot be caught.
- `result` selects what a step stores at `output`: an expression or a mapping
  evaluated with the step's raw result as its data.
- A `pass` step evaluates every value of `set` on the data as it was before
  the step, then stores them in order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from waypost.errors import (
    ActivityError,
    ChildFailed,
    InvalidRequest,
    WaitTimeout,
    WorkflowError,
)
from waypost.model import approvals as ap
from waypost.model.definitions import Definition, Limits
from waypost.model.definitions.expressions import (
    Budget,
    ExpressionError,
    Meter,
    RunBudgetSpent,
    assign,
    evaluate_mapping,
    parse_output_path,
)
from waypost.model.definitions.format import json_type_name
from waypost.model.definitions.validate import DEFAULT_ERROR_OUTPUT
from waypost.model.identity import check_id

from .calls import start_call
from .context import ContextHost, instance_of
from .loop import StepFuture

if TYPE_CHECKING:
    from .context import WorkflowContext

__all__ = ["DEFINITIONS_QUEUE", "HTTP_ACTIVITY", "JOIN_BY_PATHS", "InterpreterSteps", "StepFailure"]

DEFINITIONS_QUEUE = "waypost:definitions"
"""The workflow queue of every definition run: any engine can interpret any definition."""

HTTP_ACTIVITY = "waypost.http"
"""The built-in activity that carries out `http` steps (engines given `http_allow` serve it)."""

JOIN_BY_PATHS = "waypost:join-by-paths"
"""The patch marker of runs whose parallel joins merge by the paths each branch wrote."""

_DEFAULT_LIMITS = Limits()


class StepFailure(Exception):
    """A step ended its walk badly: caught by a `catch`, or it fails the run (after
    compensation). `error` is the interpreter's name for it, `type` the activity's (or
    called run's) own error type, the same as `error` otherwise."""

    def __init__(self, error: str, message: str, step: str, type: str | None = None) -> None:
        super().__init__(message)
        self.error = error
        self.message = message
        self.step = step
        self.type = type or error

    def described(self) -> dict[str, Any]:
        """What a catch stores, and a tolerated map item's place holds."""
        return {"error": self.error, "type": self.type, "message": self.message, "step": self.step}


def _policy(approvers: Mapping[str, Any]) -> ap.Policy:
    users = tuple(approvers.get("users", ()))
    groups = tuple(approvers.get("groups", ()))
    veto = bool(approvers.get("veto", True))
    if approvers.get("all"):
        return ap.Policy("all", users, groups, len(users), veto)
    quorum = int(approvers.get("quorum", 1))
    return ap.Policy("quorum" if quorum > 1 else "any", users, groups, quorum, veto)


_RETRY_FIELDS: dict[str, type] = {
    "max_attempts": int,
    "initial_interval": float,
    "backoff": float,
    "max_interval": float,
}


def _retry(spec: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The retry fields a step sets (seconds); the activity's policy supplies the rest."""
    if not spec:
        return None
    return {name: cast(spec[name]) for name, cast in _RETRY_FIELDS.items() if name in spec}


def _instant(value: Any, step: str) -> float:
    """Seconds since the epoch of an ISO-8601 date-time (UTC when it names no zone)."""
    if not isinstance(value, str):
        raise StepFailure(
            "expression_failed",
            f"step {step!r}: 'until' gave {value!r}, not an ISO-8601 date-time",
            step,
        )
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise StepFailure(
            "expression_failed",
            f"step {step!r}: 'until' gave {value!r}, not an ISO-8601 date-time",
            step,
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def value_at(data: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    """The value a walk stored at `path` (its branch wrote it, so it is there)."""
    value: Any = data
    for name in path:
        value = value.get(name) if isinstance(value, Mapping) else None
    return value


def expression_failure(exc: ExpressionError, step: str, where: str) -> StepFailure:
    """The failure of `step` whose expression (at `where`) failed: `expression_failed`,
    or `expression_budget_spent` once the run's expressions together went past its
    totals (every later expression of the run fails the same way)."""
    error = "expression_budget_spent" if isinstance(exc, RunBudgetSpent) else "expression_failed"
    return StepFailure(error, f"step {step!r} {where}: {exc}", step)


class InterpreterSteps:
    """The steps of a definition run (a mixin of `Interpreter`)."""

    definitions: dict[int, Definition]
    version: int
    limits: dict[str, Any]
    budget: Budget
    meter: Meter | None
    position: dict[str, str]
    waiting: bool
    compensations: list[dict[str, Any]]
    iterations: dict[str, int]
    _ctx: WorkflowContext | None
    _writes: dict[int, list[tuple[str, ...]]]

    @property
    def definition(self) -> Definition:
        return self.definitions[self.version]

    @property
    def _inst(self) -> ContextHost:
        assert self._ctx is not None
        return instance_of(self._ctx)

    async def _walk_from(self, step_id: str | None, data: dict[str, Any], path: str) -> Any:
        raise NotImplementedError

    async def take_step(
        self, step_id: str, step: Mapping[str, Any], data: dict[str, Any], path: str
    ) -> str | None:
        """Carry out one step (not `succeed` or `fail`) of the walk at `path`; the next
        step, None to end the walk. A failure its `catch` names goes where it says."""
        try:
            return await self._take_step(step_id, step, data, path)
        except StepFailure as failure:
            for rule in step.get("catch", ()):
                names = rule["errors"]
                if "*" in names or failure.error in names or failure.type in names:
                    where = parse_output_path(rule.get("output", DEFAULT_ERROR_OUTPUT))
                    self._assign(data, where, failure.described())
                    caught: str = rule["next"]
                    return caught
            raise

    async def _take_step(
        self, step_id: str, step: Mapping[str, Any], data: dict[str, Any], path: str
    ) -> str | None:
        kind = step["type"]
        if kind == "activity":
            return await self._activity(step_id, step, data)
        if kind == "approval":
            return await self._waiting(self._approval(step_id, step, data), path)
        if kind == "wait":
            return await self._waiting(self._wait(step_id, step, data), path)
        if kind == "choice":
            return self._choice(step_id, step, data)
        if kind == "parallel":
            return await self._parallel(step_id, step, data, path)
        if kind == "map":
            return await self._map(step_id, step, data, path)
        if kind == "pass":
            return self._pass(step_id, step, data)
        if kind == "call":
            return await self._call_definition(step_id, step, data)
        # validation makes this unreachable
        raise WorkflowError(f"step {step_id!r} has unknown type {kind!r}")

    async def _waiting(self, step: Any, path: str) -> str | None:
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

    def _mapping(
        self, mapping: Mapping[str, Any] | None, data: Any, step: str, where: str
    ) -> dict[str, Any]:
        if not mapping:
            return {}
        try:
            return evaluate_mapping(mapping, data, self.budget, self.meter)
        except ExpressionError as exc:
            raise expression_failure(exc, step, where) from None

    def _store(
        self, step_id: str, step: Mapping[str, Any], data: dict[str, Any], value: Any
    ) -> None:
        """Store a step's result at its `output`, as its `result` selects it."""
        location = step.get("output")
        if not location:
            return
        selected = step.get("result")
        if isinstance(selected, Mapping):
            value = self._mapping(selected, value, step_id, "result")
        elif selected is not None:
            value = self.evaluate(selected, value, step_id, "result")
        self._assign(data, parse_output_path(location), value)

    def _assign(self, data: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
        """Store `value` at `path` in a walk's data (in place), remembering the write."""
        updated = assign(data, "$." + ".".join(path), value)
        data.clear()
        data.update(updated)
        writes = self._writes.get(id(data))
        if writes is not None:  # the data of a parallel branch
            writes.append(path)

    # == steps ==================================================================
    def _spec(self, step_id: str, step: Mapping[str, Any], **extra: Any) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "definition_step": step_id,
            "definition_version": self.version,
            **extra,
        }
        if "timeout" in step:
            spec["timeout"] = float(step["timeout"])
        if "queue" in step:
            spec["queue"] = step["queue"]
        retry = _retry(step.get("retry"))
        if retry is not None:
            spec["retry"] = retry
        return spec

    async def _activity(
        self, step_id: str, step: Mapping[str, Any], data: dict[str, Any]
    ) -> str | None:
        args: tuple[Any, ...]
        if "http" in step:
            http = step["http"]
            body = self._mapping(http.get("body"), data, step_id, "body")
            request: dict[str, Any] = {
                "url": http["url"],
                "method": http.get("method") or ("POST" if "body" in http else "GET"),
                "headers": dict(http.get("headers") or {}),
                "timeout": float(step.get("timeout", 30)),
            }
            if "body" in http:
                request["body"] = body
            if "signature" in http:
                request["signature"] = dict(http["signature"])
            name, args, kwargs = HTTP_ACTIVITY, (request,), {}
        else:
            name, args = step["activity"], ()
            kwargs = self._mapping(step.get("input"), data, step_id, "input")
        call = self._inst.schedule_activity(name, args, kwargs, self._spec(step_id, step))
        try:
            result = await call
        except ActivityError as exc:
            message = exc.error.get("message") or str(exc)
            raise StepFailure(
                "activity_failed",
                f"step {step_id!r} ({name}) failed after {exc.attempts} attempt(s): {message}",
                step_id,
                type=exc.type,
            ) from None
        self._store(step_id, step, data, result)
        compensate = step.get("compensate")
        # A step an operator skipped did nothing here: there is nothing of it to undo.
        if compensate is not None and not (isinstance(call, StepFuture) and call.skipped):
            self.compensations.append(
                {
                    "step": step_id,
                    "version": self.version,
                    "activity": compensate["activity"],
                    "input": self._mapping(compensate.get("input"), data, step_id, "compensate"),
                }
            )
        next_step: str | None = step.get("next")
        return next_step

    async def _call_definition(
        self, step_id: str, step: Mapping[str, Any], data: dict[str, Any]
    ) -> str | None:
        inputs = self._mapping(step.get("input"), data, step_id, "input")
        try:
            result = await start_call(self._inst, step, inputs, self.limits, DEFINITIONS_QUEUE)
        except ChildFailed as exc:
            raise StepFailure(
                "call_failed",
                f"step {step_id!r} (definition {step['definition']!r}) {exc.status}: "
                f"{exc.type}: {exc.message}",
                step_id,
                type=exc.type,
            ) from None
        self._store(step_id, step, data, result)
        next_step: str | None = step.get("next")
        return next_step

    async def _approval(
        self, step_id: str, step: Mapping[str, Any], data: dict[str, Any]
    ) -> str | None:
        assert self._ctx is not None
        shown = self._mapping(step.get("input"), data, step_id, "input") or None
        try:
            policy = _policy(step["approvers"])
        except Exception as exc:  # a policy the model refuses (e.g. `all` with groups)
            raise StepFailure("invalid_approvers", f"step {step_id!r}: {exc}", step_id) from None
        decision = await self._ctx.approval(
            step_id, approvers=policy, expires_in=step.get("expires_in"), data=shown
        )
        self._store(
            step_id,
            step,
            data,
            {
                "outcome": decision.outcome,
                "approval_id": decision.approval_id,
                "votes": [
                    {"principal": v.principal, "decision": v.decision, "comment": v.comment}
                    for v in decision.votes
                ],
            },
        )
        if decision.outcome == ap.APPROVED:
            approved: str | None = step.get("next")
            return approved
        field = "on_reject" if decision.outcome == ap.REJECTED else "on_expiry"
        if field in step:
            handled: str = step[field]
            return handled
        what = "rejected" if decision.outcome == ap.REJECTED else "expired"
        raise StepFailure(what, f"the approval of step {step_id!r} was {what}", step_id)

    async def _wait(
        self, step_id: str, step: Mapping[str, Any], data: dict[str, Any]
    ) -> str | None:
        assert self._ctx is not None
        timeout = step.get("timeout")
        if "signal" in step:
            correlate = self._correlation(step_id, step, data)
            try:
                payload = await self._ctx.wait_signal(step["signal"], timeout, correlate=correlate)
            except WaitTimeout:
                return self._timed_out_at(step_id, step)
            self._store(step_id, step, data, payload)
            signalled: str | None = step.get("next")
            return signalled
        if "duration" in step:
            delay = float(step["duration"])
            if timeout is not None and float(timeout) < delay:
                await self._ctx.sleep(float(timeout))
                return self._timed_out_at(step_id, step)
            await self._ctx.sleep(delay)
        else:
            at = _instant(self.evaluate(step["until"], data, step_id, "until"), step_id)
            now = asyncio.get_running_loop().time()  # the time of the event being handled
            if timeout is not None and now + float(timeout) < at:
                await self._ctx.sleep(float(timeout))
                return self._timed_out_at(step_id, step)
            await self._inst.sleep_until(at)
        waited: str | None = step.get("next")
        return waited

    def _correlation(
        self, step_id: str, step: Mapping[str, Any], data: dict[str, Any]
    ) -> tuple[str, str] | None:
        """A wait's `correlate` pair: its key, and its value expression's text or number."""
        correlate = step.get("correlate")
        if not isinstance(correlate, Mapping):
            return None
        value = self.evaluate(correlate["value"], data, step_id, "correlate.value")
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        try:
            return str(correlate["key"]), check_id(value, "correlate.value")
        except InvalidRequest as exc:
            raise StepFailure(
                "expression_failed",
                f"step {step_id!r} correlate.value must give a string or a whole number: {exc}",
                step_id,
            ) from None

    @staticmethod
    def _timed_out_at(step_id: str, step: Mapping[str, Any]) -> str:
        if "on_timeout" in step:
            target: str = step["on_timeout"]
            return target
        raise StepFailure(
            "timeout", f"step {step_id!r} waited {float(step['timeout']):g} s in vain", step_id
        )

    def _choice(self, step_id: str, step: Mapping[str, Any], data: dict[str, Any]) -> str:
        passes = self.iterations.get(step_id, 0) + 1
        self.iterations[step_id] = passes
        bound = step.get("max_iterations")
        if bound is not None and passes > int(bound):
            raise StepFailure(
                "too_many_iterations",
                f"the run passed choice {step_id!r} more than {bound} times",
                step_id,
            )
        for i, choice in enumerate(step["choices"]):
            try:
                holds = self.definition.expression(choice["when"]).holds(
                    data, self.budget, self.meter
                )
            except ExpressionError as exc:
                raise expression_failure(exc, step_id, f"choices[{i}]") from None
            if holds:
                chosen: str = choice["next"]
                return chosen
        default: str = step["default"]
        return default

    async def _parallel(
        self, step_id: str, step: Mapping[str, Any], data: dict[str, Any], path: str
    ) -> str | None:
        loop = asyncio.get_running_loop()
        copies = [dict(data) for _ in step["branches"]]
        for copy in copies:
            self._writes[id(copy)] = []
        tasks = [
            loop.create_task(self._walk_from(branch["start"], copy, f"{path}{step_id}[{i}]/"))
            for i, (branch, copy) in enumerate(zip(step["branches"], copies, strict=True))
        ]
        try:
            _, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        except asyncio.CancelledError:
            for task in tasks:
                task.cancel()
            for copy in copies:
                self._writes.pop(id(copy), None)
            raise
        failed = next(
            (t for t in tasks if t.done() and not t.cancelled() and t.exception() is not None),
            None,
        )
        if failed is not None:
            for task in pending:
                task.cancel()
            error = failed.exception()
            assert error is not None
            raise error
        assert self._ctx is not None
        if self._ctx.patched(JOIN_BY_PATHS):
            for copy in copies:
                for written in dict.fromkeys(self._writes.pop(id(copy), [])):
                    self._assign(data, written, value_at(copy, written))
        else:  # how runs that joined before paths were merged did it (see the module's doc)
            before = dict(data)
            for copy in copies:
                self._writes.pop(id(copy), None)
                for name, value in copy.items():
                    if name not in before or before[name] != value:
                        data[name] = value
        joined: str | None = step.get("next")
        return joined

    def _pass(self, step_id: str, step: Mapping[str, Any], data: dict[str, Any]) -> str | None:
        values = self._mapping(step["set"], data, step_id, "set")
        for location, value in values.items():
            self._assign(data, parse_output_path(location), value)
        next_step: str | None = step.get("next")
        return next_step

    def _recorded(self, name: str) -> int:
        """A limit the run's RunStarted recorded (the default, for runs from before it)."""
        value = self.limits.get(name, getattr(_DEFAULT_LIMITS, name))
        return int(value)

    async def _map(
        self, step_id: str, step: Mapping[str, Any], data: dict[str, Any], path: str
    ) -> str | None:
        items = self.evaluate(step["items"], data, step_id, "items")
        if not isinstance(items, list):
            raise StepFailure(
                "expression_failed",
                f"step {step_id!r} items gave {json_type_name(items)}, not an array",
                step_id,
            )
        most = int(step.get("max_items", self._recorded("max_map_items")))
        if len(items) > most:
            raise StepFailure(
                "too_many_items",
                f"step {step_id!r} has {len(items)} items, more than its {most}",
                step_id,
            )
        width = int(step.get("concurrency", self._recorded("max_map_concurrency")))
        tolerate = int(step.get("tolerate", 0))
        loop = asyncio.get_running_loop()
        results: list[Any] = [None] * len(items)
        running: dict[asyncio.Task[Any], int] = {}
        ended: list[asyncio.Task[Any]] = []  # in the order the items ended (the history's)
        started = failures = 0
        try:
            while started < len(items) or running:
                while started < len(items) and len(running) < width:
                    # Each item's task is the map walk's next operation: its steps' ids
                    # are `<n>.<k>` with n fixed by the item's place in the starting order.
                    own = {**data, "item": items[started], "index": started}
                    self._writes[id(own)] = []
                    item_path = f"{path}{step_id}[{started}]/"
                    task = loop.create_task(self._map_item(step["iterator"], own, item_path))
                    task.add_done_callback(ended.append)
                    running[task] = started
                    started += 1
                while not ended:
                    await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                while ended:
                    task = ended.pop(0)
                    index = running.pop(task)
                    error = task.exception()
                    if error is None:
                        results[index] = task.result()
                    elif isinstance(error, StepFailure) and failures < tolerate:
                        failures += 1
                        results[index] = error.described()
                    else:
                        raise error
        finally:
            for task in running:
                task.cancel()
        self._store(step_id, step, data, results)
        next_step: str | None = step.get("next")
        return next_step

    async def _map_item(self, iterator: Mapping[str, Any], own: dict[str, Any], path: str) -> Any:
        """Walk a map's iterator over one item's data; the item's result."""
        try:
            ended = await self._walk_from(iterator["start"], own, path)
            if ended is not own:  # a succeed step's output
                return ended
            stored: dict[str, Any] = {}
            for written in dict.fromkeys(self._writes.get(id(own), [])):
                stored = assign(stored, "$." + ".".join(written), value_at(own, written))
            return stored
        finally:
            self._writes.pop(id(own), None)
