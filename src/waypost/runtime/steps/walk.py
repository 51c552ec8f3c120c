"""What a step type's handler may use of the walk it is a step of (`Walk`), and how a
step fails (`StepFailure`).

The definition interpreter (`runtime/interpreter.py`) is the one `Walk`: it keeps the
run's data, versions, budgets and compensations; a handler reads and changes them only
through this protocol.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from waypost.model.definitions import Definition
from waypost.model.definitions.expressions import ExpressionError, RunBudgetSpent

if TYPE_CHECKING:
    from waypost.runtime.context import ContextHost, WorkflowContext


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


def expression_failure(exc: ExpressionError, step: str, where: str) -> StepFailure:
    """The failure of `step` whose expression (at `where`) failed: `expression_failed`,
    or `expression_budget_spent` once the run's expressions together went past its
    totals (every later expression of the run fails the same way)."""
    error = "expression_budget_spent" if isinstance(exc, RunBudgetSpent) else "expression_failed"
    return StepFailure(error, f"step {step!r} {where}: {exc}", step)


def value_at(data: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    """The value a walk stored at `path` (its branch wrote it, so it is there)."""
    value: Any = data
    for name in path:
        value = value.get(name) if isinstance(value, Mapping) else None
    return value


StepHandler = Callable[["Walk", str, Mapping[str, Any], dict[str, Any], str], Awaitable[str | None]]
"""`await handler(walk, step_id, step, data, path)`: the next step's id, None to end."""


def waiting(handler: StepHandler) -> StepHandler:
    """A step type whose step waits (approval, wait): a migration may move a run there."""

    async def run(
        walk: Walk, step_id: str, step: Mapping[str, Any], data: dict[str, Any], path: str
    ) -> str | None:
        return await walk.waiting_in(handler(walk, step_id, step, data, path), path)

    return run


class Walk(Protocol):
    """The definition run a step belongs to, as its step handler sees it."""

    @property
    def version(self) -> int:
        """The definition version the run is on now."""
        ...

    @property
    def definition(self) -> Definition: ...

    @property
    def limits(self) -> dict[str, Any]:
        """The limits the run's RunStarted recorded."""
        ...

    @property
    def ctx(self) -> WorkflowContext: ...

    @property
    def inst(self) -> ContextHost: ...

    def walk_from(
        self, step_id: str | None, data: dict[str, Any], path: str
    ) -> Coroutine[Any, Any, Any]:
        """Run steps from `step_id` until one ends the walk (a branch, a map item)."""
        ...

    def waiting_in(self, step: Awaitable[str | None], path: str) -> Awaitable[str | None]:
        """Await a waiting step (approval, wait); a migration may move a run waiting so."""
        ...

    def evaluate(self, text: str, data: Any, step: str, where: str) -> Any:
        """The value of an expression; a StepFailure if it cannot be evaluated."""
        ...

    def holds(self, text: str, data: Any, step: str, where: str) -> bool:
        """Whether a condition holds; a StepFailure if it cannot be evaluated."""
        ...

    def mapping(
        self, mapping: Mapping[str, Any] | None, data: Any, step: str, where: str
    ) -> dict[str, Any]:
        """A mapping of expressions evaluated over `data`."""
        ...

    def store(
        self, step_id: str, step: Mapping[str, Any], data: dict[str, Any], value: Any
    ) -> None:
        """Store a step's result at its `output`, as its `result` selects it."""
        ...

    def assign(self, data: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
        """Store `value` at `path` in a walk's data, remembering the write."""
        ...

    def track_writes(self, data: dict[str, Any]) -> None:
        """Remember the paths stored into `data` (a branch's or an item's copy)."""
        ...

    def writes(self, data: dict[str, Any]) -> list[tuple[str, ...]]:
        """The paths stored into `data` so far, in order."""
        ...

    def forget_writes(self, data: dict[str, Any]) -> list[tuple[str, ...]]:
        """Stop remembering the writes into `data`; those remembered."""
        ...

    def count_pass(self, step_id: str) -> int:
        """Count one more pass through `step_id`; how many there were."""
        ...

    def add_compensation(self, entry: dict[str, Any]) -> None:
        """Remember how to undo a completed step, should the run fail or be cancelled."""
        ...
