"""Repairs as workflow code sees them: the repair seam of a run (`RepairHooks`, a part
the instance owns, and the functions replay uses).

- Events a repair voided (`RunRetried`/`StepSkipped` name them in `voids`) are never
  fed to the code on replay: the code reaches the repaired step with no result.
- `StepSkipped` resolves the step's awaiting call with the operator's `output`, and
  marks its future `skipped` (a definition does not compensate a step that did nothing).
- `InputUpdated` goes to the handler a definition run's interpreter registered.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from waypost.model.events import Event, EventType
from waypost.model.repairs import voided_seqs

from .loop import Pending, StepFuture
from .port import InstancePort

_E = EventType


def voided(history: Sequence[Event]) -> frozenset[int]:
    """The events of `history` a repair voided: replay does not feed them."""
    return voided_seqs(history)


def step_value(p: Pending, type_: str, data: dict[str, Any]) -> Any:
    """The stored value an activity step's call returns: its result, or the output an
    operator gave when skipping it."""
    skipped = type_ == _E.STEP_SKIPPED
    if isinstance(p.future, StepFuture):
        p.future.skipped = skipped
    return data.get("output") if skipped else data.get("result")


class RepairHooks:
    """Where a run's InputUpdated events go (a definition run's interpreter)."""

    def __init__(self, port: InstancePort) -> None:
        self._port = port
        self._input_handler: Callable[[dict[str, Any]], None] | None = None

    def on_input_updated(self, handler: Callable[[dict[str, Any]], None]) -> None:
        """Let `handler` take the run's InputUpdated events (definition runs only)."""
        self._input_handler = handler

    def take_input_update(self, data: dict[str, Any]) -> None:
        if self._input_handler is None:
            return  # workflow code has no data of this kind: the command refuses it
        try:
            self._input_handler(data)
        except BaseException as exc:
            self._port.fail_from_callback(exc)
