"""How the remote client's calls cross the wire: a request checked before it is sent, the
wire of a request whose route is written by hand, a URL's path segments, a record rebuilt
from its JSON form."""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Awaitable, Callable
from datetime import datetime
from enum import Enum
from typing import Any, TypeVar
from urllib.parse import quote

from waypost import errors as e
from waypost.model import operations as ops, surfaces
from waypost.model.identity import Principal, check_id
from waypost.model.requests import Http

from .door import Sends

R = TypeVar("R")
Q = TypeVar("Q", bound=ops.Request[Any])

# How a request whose route is written by hand crosses: given the client's `_send` and the
# request (checked here), it sends it the way its route takes it and answers what the
# engine's call of the request answers. Each `remote_*` module has the wires of its domain.
Wire = Callable[[Sends, Any], Awaitable[Any]]
Wires = dict[type[ops.Request[Any]], Wire]


def checked_here(request: Q) -> Q:
    """`request` checked as the server's door will check its fields (ids, reasons, counts,
    JSON values): a bad one is refused here, with the engine's error, before anything is
    sent (and NaN, which has no JSON form, never reaches the server as something else).
    The server checks it again, with the caller's roles."""
    done: Q = request.checked(Principal.anonymous())  # type: ignore[assignment]
    return done


def route(request: ops.Request[Any]) -> tuple[str, str]:
    """The method and path of the route `request` declares (`Http`), its fields in it."""
    http = type(request).http
    if not isinstance(http, Http):
        raise e.InvalidRequest(f"{type(request).__name__} has no route of its own")
    return http.method, http.url(request)


def body(request: ops.Request[Any], **names: str) -> dict[str, Any]:
    """The JSON body of `request` for its route: the fields its path does not carry (as a
    derived route's), each under the route's name for it where `names` (field=name) has one."""
    return {names.get(field, field): value for field, value in surfaces.body_of(request).items()}


def declared(answer: Callable[[Any], Any], **names: str) -> Wire:
    """The wire of a request sent as its declaration (`Http`) says: over its route, its
    path fields in the path, the others its JSON body (`body`; none if it has no other
    field); `answer` reads what the route answers."""

    async def wire(send: Sends, asked: Any) -> Any:
        sent = body(asked, **names)
        if not sent:
            return answer(await send(*route(asked)))
        return answer(await send(*route(asked), json=sent))

    return wire


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
