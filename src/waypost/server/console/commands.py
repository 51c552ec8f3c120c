"""The operator commands as the run page's forms: each names its request, the fields
its form shows, and how the form's text becomes the request (JSON fields parsed here,
every other check the door's)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from waypost.errors import InvalidRequest
from waypost.model import operations as ops, surfaces
from waypost.model.requests import Form, Http

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
    return Command(
        name, form.label, kind, form.fields, build, danger=form.danger, after_end=form.after_end
    )


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
