"""Continue-as-new: a run ends its generation and goes on as a fresh one.

`ctx.continue_as_new(input)` raises `ContinueAsNew`, a `BaseException` so that the
workflow's own `except Exception` blocks do not swallow it. When it ends the root task,
the instance's outcome is `RunContinuedAsNew{input, generation, signals}`: the next
generation's number, its input (encoded), and the signals this generation received but
never took in (also those fed after the code continued, before the commit), so that none
is lost across the boundary. The store ends the generation
and starts the next in the same transaction (decision 0010): same run id, a new history
numbered from 1 whose RunStarted names the generation it continues.

Step ids of generation n > 1 start with `n/` ("2/1", "2/4.1"), so a step, its idempotency
key and its approval id never repeat a previous generation's, and a late result of an
attempt the previous generation started can never be taken for one of this generation.
"""

from __future__ import annotations

from typing import Any, Protocol

from waypost.errors import PayloadError
from waypost.model.codec import Codec
from waypost.model.events import RunCancelled, RunContinuedAsNew


class ContinueAsNew(BaseException):
    """Raised by `WorkflowContext.continue_as_new`; ends the generation, not the run."""

    def __init__(self, input: Any) -> None:
        super().__init__("continue as new")
        self.input = input


def step_prefix(generation: int) -> str:
    """The path the root task of `generation` numbers its steps under."""
    return "" if generation <= 1 else f"{generation}/"


class Continuing(Protocol):
    codec: Codec
    generation: int

    @property
    def cancel_requested(self) -> bool: ...


def continued(exc: ContinueAsNew, inst: Continuing) -> RunCancelled | RunContinuedAsNew:
    """The outcome that ends `inst`'s generation: RunContinuedAsNew, or RunCancelled if
    the run was asked to cancel (a cancelled run ends; it does not go on). Raises
    `PayloadError` if the codec cannot encode the next generation's input."""
    if inst.cancel_requested:
        return RunCancelled(reason="cancelled while continuing as new")
    try:
        encoded = inst.codec.encode(exc.input)
    except PayloadError as err:
        raise PayloadError(f"the input to continue as new: {err}") from err
    # `signals` is filled in when the decision is committed (`unread_signals`): signals
    # fed after the code continued, in the same activation, are handed on too.
    return RunContinuedAsNew(input=encoded, generation=inst.generation + 1, signals=[])
