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
from dataclasses import MISSING, dataclass, field, fields
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
        omit_none, absent = self.OMIT_NONE, self.absent
        for name, default, factory in _spec_of(type(self)):
            value = getattr(self, name)
            if value is UNSET or (value is None and name in omit_none):
                continue
            if absent and name in absent and value == (factory() if factory else default):
                continue  # still as read from data that lacked it
            out[name] = value
        if self.extra:
            out.update(self.extra)
        return out

    def at(self, ts: float) -> NewEvent:
        """The event to append, at time `ts`."""
        return NewEvent(self.TYPE, self.as_data(), ts)

    @classmethod
    def of_data(cls, data: dict[str, Any], ts: float) -> NewEvent:
        """The event to append with `data` as this type's data, at time `ts`: what
        `parse(data).at(ts)` gives (that round trip keeps every key and value), without
        making the object on the way; for data a step builds on its hot path."""
        return NewEvent(cls.TYPE, data, ts)

    @classmethod
    def parse(cls, source: Event | NewEvent | Mapping[str, Any]) -> Self:
        """Read a stored (or new) event's data, or the data itself, into this class."""
        data = source if isinstance(source, Mapping) else source.data
        kwargs: dict[str, Any] = {}
        absent: set[str] = set()
        names = _FIELD_NAMES.get(cls) or frozenset(n for n, _, _ in _spec_of(cls))
        extra = {k: v for k, v in data.items() if k not in names}
        omit_none = cls.OMIT_NONE
        for name, default, factory in _spec_of(cls):
            if name in data:
                value = kwargs[name] = data[name]
                if value is None and name in omit_none:
                    extra[name] = None  # an old writer wrote the null: keep it
            else:
                absent.add(name)
                kwargs[name] = factory() if factory else default
        return cls(**kwargs, extra=extra, absent=frozenset(absent))


@dataclass(frozen=True, slots=True, kw_only=True)
class Command(EventData):
    """The data of an event workflow code issues (a command): `cause` is the number of
    the event the code was handling when it issued it (set as the command is recorded)."""

    cause: int | None = None


_FIELD_NAMES: dict[type[EventData], frozenset[str]] = {}
# Each class's fields as `as_data` and `parse` walk them: name, default, default factory
# (a field without either reads as None), worked out once, when the class is registered.
_SPECS: dict[type[EventData], tuple[tuple[str, Any, Any], ...]] = {}


def _spec_of(cls: type[EventData]) -> tuple[tuple[str, Any, Any], ...]:
    found = _SPECS.get(cls)
    if found is None:
        found = _SPECS[cls] = _spec(cls)
    return found


def _spec(made: type[EventData]) -> tuple[tuple[str, Any, Any], ...]:
    spec = []
    for f in fields(made):
        if f.name in _OWN:
            continue
        default = None if f.default is MISSING else f.default
        factory = None if f.default_factory is MISSING else f.default_factory
        spec.append((f.name, default, factory))
    return tuple(spec)


_C = TypeVar("_C", bound=type[EventData])


@dataclass_transform(kw_only_default=True, frozen_default=True, field_specifiers=(field,))
def register(cls: _C) -> _C:
    """Make `cls` a frozen dataclass (keyword arguments only) and record it as the class
    of its event type."""
    made = cast(_C, dataclass(frozen=True, slots=True, kw_only=True)(cls))
    _FIELD_NAMES[made] = frozenset(f.name for f in fields(made)) - _OWN
    _SPECS[made] = _spec(made)
    if made.TYPE in CLASSES:
        raise TypeError(f"two classes for {made.TYPE}")
    CLASSES[made.TYPE] = made
    return made


CLASSES: dict[EventType, type[EventData]] = {}
"""The class of each event type."""


def parse_event(ev: Event | NewEvent) -> EventData:
    """`ev`'s data in the class of its type (a ValueError if the type is unknown)."""
    return CLASSES[EventType(ev.type)].parse(ev)
