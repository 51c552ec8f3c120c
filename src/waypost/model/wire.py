"""What operations answer, as JSON: the one form the CLI, the HTTP API and its client share.

`to_wire` turns a record (a frozen dataclass of `waypost.model.records`, an
`Event`, a `ChainProblem`) into plain JSON values: datetimes as ISO 8601 text in
UTC, enums as their values, tuples as lists. The HTTP API's fields are these
records' field names; fields are added over time, never renamed.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime
from enum import Enum
from typing import Any

from waypost.model.events import ChainProblem, Event


def to_wire(value: Any) -> Any:
    """`value` as JSON values (see the module)."""
    if isinstance(value, dict | list) and _plain(value):
        return value  # a payload: JSON already, and walking a megabyte of it costs a second
    if isinstance(value, Event):
        return event_wire(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_wire(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {str(k): to_wire(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_wire(v) for v in value]
    return value


def event_wire(event: Event) -> dict[str, Any]:
    """One event of a history: its place, type, time, data and chain hash."""
    out: dict[str, Any] = {
        "seq": event.seq,
        "type": event.type,
        "time": event.time.isoformat(),
        "data": event.data,
        "hash": event.hash,
    }
    if event.undecodable:  # damaged or edited: verify says more
        out["undecodable"] = True
    return out


def problems_wire(problems: list[ChainProblem]) -> dict[str, Any]:
    """What a check of a history's chain found."""
    return {"intact": not problems, "problems": [to_wire(p) for p in problems]}


def _plain(value: dict[Any, Any] | list[Any]) -> bool:
    """Whether `value` holds only what JSON holds (the C encoder says so, or raises)."""
    try:
        json.dumps(value)
    except (TypeError, ValueError, RecursionError):
        return False
    return True
