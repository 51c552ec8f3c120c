"""What the operations answer, read from what the store keeps.

A stored record keeps a time as seconds since the epoch, roles as their names and a
status as its text; an answer (`KeyInfo`, `RunInfo`, ...) declares a time as a
`datetime` (in UTC), roles as `Role`s and a status as its enum. Most of an answer's
fields are its record's of the same name: `answer_of` copies those, read as the
answer's types say, so that a reader names only the fields it makes otherwise.
"""

from __future__ import annotations

import dataclasses
import enum
import typing
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar, overload

from waypost.model.identity import Role

A = TypeVar("A")
Read = Callable[[Any], Any]


@overload
def moment(seconds: float) -> datetime: ...
@overload
def moment(seconds: None) -> None: ...
def moment(seconds: float | None) -> datetime | None:
    """A stored time (None: never) as a `datetime` in UTC."""
    return None if seconds is None else datetime.fromtimestamp(seconds, UTC)


def known_roles(names: tuple[str, ...]) -> tuple[Role, ...]:
    """The known roles among stored names, in the order `Role` declares them."""
    return tuple(r for r in Role if r.value in names)


def answer_of(kind: type[A], record: object, **differing: Any) -> A:
    """A `kind` with the fields of `record` (a dataclass too) that have the names of its
    own, each read as its type in `kind` says (`_reader`); but for those in `differing`,
    which are given there."""
    kept = {f.name for f in dataclasses.fields(record)}  # type: ignore[arg-type]
    values = dict(differing)
    for name, read in _readers(kind):
        if name in kept and name not in differing:
            values[name] = read(getattr(record, name))
    make: Any = kind
    made: A = make(**values)
    return made


_READERS: dict[type[Any], tuple[tuple[str, Read], ...]] = {}


def _readers(kind: type[Any]) -> tuple[tuple[str, Read], ...]:
    """The fields of `kind` (a dataclass), each with how a stored value of it is read."""
    found = _READERS.get(kind)
    if found is None:
        hints = typing.get_type_hints(kind)
        found = tuple((f.name, _reader(hints[f.name])) for f in dataclasses.fields(kind) if f.init)
        _READERS[kind] = found
    return found


def _reader(hint: Any) -> Read:
    if hint is datetime or hint == datetime | None:
        return moment
    if hint == tuple[Role, ...]:
        return known_roles
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return hint
    return _as_stored


def _as_stored(value: Any) -> Any:
    return value
