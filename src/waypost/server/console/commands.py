"""The operator commands as the run page's forms: each names its request, the fields
its form shows, how the form's text becomes the request (JSON fields parsed here,
every other check the door's), the states of a run that offer it and the effect its
confirmation names.

A run's page offers only the commands its state allows (`offered`), a courtesy to the
reader: the door checks the state again, and a form posted for a state that does not
allow it is refused there with its message, as before.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from waypost.errors import InvalidRequest
from waypost.model import operations as ops, surfaces
from waypost.model.requests import Form, Http
from waypost.model.status import RunStatus

MAX_JSON = 256 * 1024  # characters of a JSON field of a form


@dataclass(frozen=True)
class RunState:
    """What of a run decides which commands its page offers."""

    status: RunStatus
    open_activity: bool = False  # a step waits for its activity's outcome (skip's target)
    definition: bool = False  # a run of a definition (its input can be updated)


_UNFINISHED = frozenset(RunStatus) - {
    RunStatus.COMPLETED,
    RunStatus.FAILED,
    RunStatus.CANCELLED,
    RunStatus.TERMINATED,
}
# The states in which the door does each command (features/operator.py, repairs.py,
# runs.py, fork.py); beside these, skip needs a step waiting for its activity (or a
# failed run) and update-input a definition run.
ALLOWED_IN: dict[str, frozenset[RunStatus]] = {
    "cancel": _UNFINISHED,
    "terminate": _UNFINISHED,
    "pause": frozenset({RunStatus.RUNNING, RunStatus.WAITING}),
    "resume": frozenset({RunStatus.PAUSED, RunStatus.SUSPENDED}),
    "retry": frozenset({RunStatus.FAILED}),
    "skip": frozenset({RunStatus.FAILED, RunStatus.RUNNING, RunStatus.WAITING, RunStatus.PAUSED}),
    "update-input": frozenset({RunStatus.WAITING}),
    "fork": frozenset(RunStatus),
    "signal": _UNFINISHED,
}

# What each command does, as its confirmation says it ("{run}": the run's id).
EFFECTS = {
    "cancel": (
        "Cancel asks run {run} to stop: work not started is dropped, its code runs its "
        "cleanup, and it ends cancelled."
    ),
    "terminate": "Terminate ends run {run} now; its code does not run its cleanup.",
    "pause": (
        "Pause holds run {run}: nothing new starts, and signals and timers wait, until it "
        "is resumed."
    ),
    "resume": (
        "Resume lets run {run} go on (a suspended run replays with the code the engine has now)."
    ),
    "retry": "Retry runs the failed step of run {run} again; results before it are kept.",
    "skip": (
        "Skip marks the step of run {run} skipped: its code takes the output given here as "
        "the step's result."
    ),
    "update-input": (
        "Update input replaces the fields given here in the data of run {run}; old and new "
        "values are recorded."
    ),
    "fork": (
        "Fork starts a new run from the history of run {run} (up to the step given here); "
        "run {run} itself is not changed."
    ),
    "signal": "Send a signal delivers it to run {run}, which sees it at its next wait for it.",
}


@dataclass(frozen=True)
class Command:
    name: str
    label: str
    request: type[ops.Request[Any]]
    fields: tuple[str, ...]  # beside the reason, which every command asks for
    build: Callable[[str, str, dict[str, str]], ops.Request[Any]]
    danger: bool = False
    needs_reason: bool = True

    def allowed(self, run: RunState) -> bool:
        """Whether a run in this state may be given the command (the door checks again)."""
        if run.status not in ALLOWED_IN.get(self.name, frozenset(RunStatus)):
            return False
        if self.name == "skip" and run.status is not RunStatus.FAILED:
            return run.open_activity
        if self.name == "update-input":
            return run.definition
        return True

    def effect(self, run_id: str) -> str:
        """What the command does to run `run_id`, in the words its confirmation shows."""
        return EFFECTS.get(self.name, f"{self.label} acts on run {{run}}.").format(run=run_id)


def json_field(text: str, what: str) -> Any:
    if not text.strip():
        return None
    if len(text) > MAX_JSON:
        raise InvalidRequest(f"{what}: at most {MAX_JSON} characters of JSON", field=what)
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        raise InvalidRequest(f"{what} is not valid JSON", field=what) from None


def _optional(text: str) -> str | None:
    return text if text else None


def _derived(kind: type[ops.Request[Any]]) -> Command:
    """The form of an operation on a run declared with `Form(...)`: its name is its
    route's last segment (`pause`, `update-input`), its fields are the request's."""
    form, http = kind.form, kind.http
    assert isinstance(form, Form)
    assert isinstance(http, Http)
    types = {f.name: f for f in surfaces.fields_of(kind)}

    def build(run: str, reason: str, given: dict[str, str]) -> ops.Request[Any]:
        values: dict[str, Any] = {}
        for name in form.fields:
            field = types[name]
            text = given[name]
            values[name] = (
                json_field(text, name)
                if field.json
                else (text if field.required else _optional(text))
            )
        values.update(run_id=run, reason=reason)
        return kind(**values)

    name = http.path.rsplit("/", 1)[1]
    return Command(name, form.label, kind, form.fields, build, danger=form.danger)


COMMANDS: dict[str, Command] = {
    c.name: c
    for c in (
        *(_derived(kind) for kind in surfaces.forms()),
        Command(
            "fork",
            "Fork",
            ops.Fork,
            ("step",),
            lambda run, r, f: ops.Fork(run_id=run, reason=r, at_step=_optional(f["step"])),
        ),
        Command(
            "signal",
            "Send a signal",
            ops.Signal,
            ("signal", "payload"),
            lambda run, r, f: ops.Signal(
                run_id=run, signal=f["signal"], payload=json_field(f["payload"], "payload")
            ),
            needs_reason=False,
        ),
    )
}
