"""The operator commands as the run page's forms: each names its request, the fields
its form shows, and how the form's text becomes the request (JSON fields parsed here,
every other check the door's)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from waypost.errors import InvalidRequest
from waypost.model import operations as ops

MAX_JSON = 256 * 1024  # characters of a JSON field of a form


@dataclass(frozen=True)
class Command:
    name: str
    label: str
    request: type[ops.Request[Any]]
    fields: tuple[str, ...]  # beside the reason, which every command asks for
    build: Callable[[str, str, dict[str, str]], ops.Request[Any]]
    danger: bool = False
    needs_reason: bool = True
    # Offered for a finished run too (repairs and forks); the door judges the state anyway.
    after_end: bool = False

    def offered(self, finished: bool) -> bool:
        return self.after_end or not finished


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


COMMANDS: dict[str, Command] = {
    c.name: c
    for c in (
        Command(
            "terminate",
            "Terminate",
            ops.Terminate,
            (),
            lambda run, reason, f: ops.Terminate(run_id=run, reason=reason),
            danger=True,
        ),
        Command(
            "cancel",
            "Cancel",
            ops.Cancel,
            (),
            lambda run, reason, f: ops.Cancel(run_id=run, reason=reason),
            danger=True,
        ),
        Command("pause", "Pause", ops.Pause, (), lambda run, r, f: ops.Pause(run_id=run, reason=r)),
        Command(
            "resume", "Resume", ops.Resume, (), lambda run, r, f: ops.Resume(run_id=run, reason=r)
        ),
        Command(
            "retry",
            "Retry the failed step",
            ops.Retry,
            ("step",),
            lambda run, r, f: ops.Retry(run_id=run, reason=r, step=_optional(f["step"])),
            after_end=True,
        ),
        Command(
            "skip",
            "Skip a step",
            ops.Skip,
            ("step", "output"),
            lambda run, r, f: ops.Skip(
                run_id=run, reason=r, step=f["step"], output=json_field(f["output"], "output")
            ),
            after_end=True,
        ),
        Command(
            "update-input",
            "Update input",
            ops.UpdateInput,
            ("data",),
            lambda run, r, f: ops.UpdateInput(
                run_id=run, reason=r, data=json_field(f["data"], "data")
            ),
        ),
        Command(
            "fork",
            "Fork",
            ops.Fork,
            ("step",),
            lambda run, r, f: ops.Fork(run_id=run, reason=r, at_step=_optional(f["step"])),
            after_end=True,
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
