"""How the remote client's hand-written calls cross the wire: a request checked before it
is sent, a URL's path segments, a record rebuilt from its JSON form."""

from __future__ import annotations

import dataclasses
import typing
from datetime import datetime
from enum import Enum
from typing import Any, TypeVar
from urllib.parse import quote

from waypost import errors as e
from waypost.model import operations as ops
from waypost.model.identity import Principal, check_id

R = TypeVar("R")
Q = TypeVar("Q", bound=ops.Request[Any])


def checked_here(request: Q) -> Q:
    """`request` checked as the server's door will check its fields (ids, reasons, counts,
    JSON values): a bad one is refused here, with the engine's error, before anything is
    sent (and NaN, which has no JSON form, never reaches the server as something else).
    The server checks it again, with the caller's roles."""
    done: Q = request.checked(Principal.anonymous())  # type: ignore[assignment]
    return done


def segment(text: str) -> str:
    """`text` as one path segment of a URL."""
    return quote(text, safe="")


def run_path(run_id: str, tail: str = "") -> str:
    """The path of run `run_id` (checked as the engine checks an id: `InvalidRequest` for
    an empty, overlong or control-character id, before anything is sent), then `tail`."""
    return f"/v1/runs/{segment(check_id(run_id, 'run_id'))}{tail}"


def record(cls: type[R], data: Any) -> R:
    """A record dataclass from its JSON form (`to_wire`): datetimes from ISO text, enums
    from their values; keys the record does not have are left out (a newer server)."""
    if not isinstance(data, dict):
        raise e.WaypostError(f"the server answered {type(data).__name__}, not a {cls.__name__}")
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for field in dataclasses.fields(cls):  # type: ignore[arg-type]
        if field.name in data:
            values[field.name] = _value(hints[field.name], data[field.name])
    return cls(**values)


def _value(hint: Any, value: Any) -> Any:
    if value is None:
        return None
    kinds = typing.get_args(hint) or (hint,)
    if datetime in kinds and isinstance(value, str):
        return datetime.fromisoformat(value)
    for kind in kinds:
        if isinstance(kind, type) and issubclass(kind, Enum):
            return kind(value)
    return value
