"""The typed form of an event's data: one frozen dataclass per event type.

Each class names its type (`TYPE`) and its fields, which are the keys of the JSON data
it is stored as. It is written in one place (`as_data`, `at`) and read in one place
(`parse`), so that what a history holds is declared once.

The stored text does not change with the classes: `parse` then `as_data` gives back the
data it read, key for key. Keys an older or newer writer added that a class does not
name are kept (`extra`); keys a class names that an older history lacks read as the
field's default, and are left out again when written back (`absent`) unless the
field was given another value since (`dataclasses.replace`). Optional keys
(`OMIT_NONE`) are written only when they have a value; a field whose value is `UNSET`
(one that may hold any JSON value, None included) is not written.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, Field, dataclass, field, fields
from enum import Enum
from typing import Any, ClassVar, Final, Self, TypeVar, cast, dataclass_transform

from .core import Event, EventType, NewEvent


class Unset(Enum):
    """The value of a field that is not written (not even as null)."""

    UNSET = "unset"

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Final = Unset.UNSET

_OWN = frozenset({"extra", "absent"})


@dataclass(frozen=True, slots=True, kw_only=True)
class EventData:
    """The data of one event type (see the module's text)."""

    TYPE: ClassVar[EventType]
    # Keys written only when their field is not None.
    OMIT_NONE: ClassVar[frozenset[str]] = frozenset()

    # Keys of the stored data this class does not name, kept as they were.
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    # Keys this class names that the stored data lacked (read as the field's default).
    absent: frozenset[str] = field(default=frozenset(), compare=False, repr=False)

    def as_data(self) -> dict[str, Any]:
        """The event's data, as stored."""
        out: dict[str, Any] = {}
        for f in fields(self):
            name = f.name
            if name in _OWN:
                continue
            value = getattr(self, name)
            if value is UNSET or (value is None and name in self.OMIT_NONE):
                continue
            if name in self.absent and value == _default(f):
                continue  # still as read from data that lacked it
            out[name] = value
        out.update(self.extra)
        return out

    def at(self, ts: float) -> NewEvent:
        """The event to append, at time `ts`."""
        return NewEvent(self.TYPE, self.as_data(), ts)

    @classmethod
    def parse(cls, source: Event | NewEvent | Mapping[str, Any]) -> Self:
        """Read a stored (or new) event's data, or the data itself, into this class."""
        data = source if isinstance(source, Mapping) else source.data
        kwargs: dict[str, Any] = {}
        absent: set[str] = set()
        extra = {k: v for k, v in data.items() if k not in _FIELD_NAMES.get(cls, ())}
        for f in fields(cls):
            name = f.name
            if name in _OWN:
                continue
            if name in data:
                kwargs[name] = data[name]
                if data[name] is None and name in cls.OMIT_NONE:
                    extra[name] = None  # an old writer wrote the null: keep it
            else:
                absent.add(name)
                kwargs[name] = _default(f)
        return cls(**kwargs, extra=extra, absent=frozenset(absent))


def _default(f: Field[Any]) -> Any:
    """What a field reads as when the data lacks its key: its default, else None."""
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class Command(EventData):
    """The data of an event workflow code issues (a command): `cause` is the number of
    the event the code was handling when it issued it (set as the command is recorded)."""

    cause: int | None = None


_FIELD_NAMES: dict[type[EventData], frozenset[str]] = {}


_C = TypeVar("_C", bound=type[EventData])


@dataclass_transform(kw_only_default=True, frozen_default=True, field_specifiers=(field,))
def register(cls: _C) -> _C:
    """Make `cls` a frozen dataclass (keyword arguments only) and record it as the class
    of its event type."""
    made = cast(_C, dataclass(frozen=True, slots=True, kw_only=True)(cls))
    _FIELD_NAMES[made] = frozenset(f.name for f in fields(made)) - _OWN
    if made.TYPE in CLASSES:
        raise TypeError(f"two classes for {made.TYPE}")
    CLASSES[made.TYPE] = made
    return made


CLASSES: dict[EventType, type[EventData]] = {}
"""The class of each event type."""


def parse_event(ev: Event | NewEvent) -> EventData:
    """`ev`'s data in the class of its type (a ValueError if the type is unknown)."""
    return CLASSES[EventType(ev.type)].parse(ev)
