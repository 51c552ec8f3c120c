"""The repair commands as requests: retry, skip, update-input.

Declared beside `operations.py` in the same form (and re-exported from it) so that the
catalogue there stays within its size. Each needs `operator` (or `admin`) and a
reason; what the run's state allows is decided by the handler (`features/repairs.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from waypost.errors import InvalidRequest
from waypost.model.definitions.format import nesting_problem, unstorable_problem
from waypost.model.identity import Principal, check_id
from waypost.model.requests import (
    WHY,
    Check,
    Form,
    Request,
    RunCommand,
    checked,
    command_cli,
    command_route,
    described,
)

MAX_FIELDS = 100
"""How many fields of a run's data one update-input may replace."""


def _json_value(value: Any, what: str) -> None:
    """Refuse a value nested too deep or holding text that cannot be stored (the size is
    the tenant's `max_payload_bytes`, checked by the handler)."""
    problem = nesting_problem(value, "$") or unstorable_problem(value, "$")
    if problem is not None:
        raise InvalidRequest(f"{what}: {problem}", field=what)


@dataclass(frozen=True)
class Retry(RunCommand):
    """Re-run a failed run from its failed step (earlier results kept, not re-executed).

    `step` names the step to re-run (its step id, or a definition step's name); it must
    be the step whose failure failed the run. None: that step, whichever it is.
    """

    name = call = "retry"
    http = command_route(
        "retry", "Re-run a failed run from its failed step (earlier results kept)."
    )
    cli = command_cli("retry", lambda r: f"{r.run_id} retried: its failed step runs again")
    form = Form("Retry the failed step", ("step",), after_end=True)
    step: str | None = checked(
        Check.OPTIONAL_ID,
        what="step",
        default=None,
        doc="The failed step (its id or definition step name).",
    )


@dataclass(frozen=True)
class Skip(RunCommand):
    """Mark an activity step skipped, with the output the run uses instead of its result.

    The step is the failed step of a failed run, or a step whose attempt is waiting or
    running. A definition step marked `skippable` needs `operator`; any other step `admin`.
    """

    name = call = "skip"
    http = command_route("skip", "Mark a failed, waiting or running step skipped, with its output.")
    cli = command_cli("skip", lambda r: f"{r.run_id} step {r.step} skipped")
    form = Form("Skip a step", ("step", "output"), after_end=True)
    step: str = checked(
        Check.ID, what="step", doc="The step to skip (its id or definition step name)."
    )
    output: Any = described("What the run uses as the step's output (JSON).", default=None)

    def checked(self, principal: Principal) -> Request[None]:
        _json_value(self.output, "skip's output")
        return super().checked(principal)


@dataclass(frozen=True)
class UpdateInput(RunCommand):
    """Replace fields of the data a waiting definition run's next steps use."""

    name = call = "update_input"
    http = command_route("update-input", "Replace fields of a waiting definition run's data.")
    cli = command_cli(
        "update-input", lambda r: f"{r.run_id} input updated: {', '.join(sorted(r.data))}"
    )
    form = Form("Update input", ("data",))
    reason: str = checked(Check.REASON, what="update-input's reason", doc=WHY)
    data: dict[str, Any] | None = described(
        "The fields of the run's data to replace (a JSON object)."
    )

    def checked(self, principal: Principal) -> Request[None]:
        data = self.data
        if not isinstance(data, dict) or not data:
            raise InvalidRequest("update-input's data: a JSON object naming at least one field")
        if len(data) > MAX_FIELDS:
            raise InvalidRequest(f"update-input's data: at most {MAX_FIELDS} fields")
        for name in data:
            if not isinstance(name, str):
                raise InvalidRequest("update-input's data: field names are strings")
            check_id(name, "update-input's field name")
        _json_value(data, "update-input's data")
        return super().checked(principal)


REPAIR_OPERATIONS: tuple[type[Request[Any]], ...] = (Retry, Skip, UpdateInput)
