"""Reading a run's history in tests."""

from __future__ import annotations

import waypost as wp


def of_type(events: list[wp.Event], type_: str) -> list[wp.Event]:
    return [e for e in events if e.type == type_]
