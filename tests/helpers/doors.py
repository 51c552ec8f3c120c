"""The engine's door as a test sees it: which operations a module declares and serves."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from waypost.client.door import Door
from waypost.client.engine import AsyncEngine
from waypost.model import operations as ops


def door_serving(module: ModuleType, operations: Sequence[type[Any]], tmp_path: Path) -> Door:
    """The door of an engine whose database is never opened, once it is checked that the
    door serves every one of `operations` and that these are every request `module`
    declares."""
    engine = AsyncEngine(f"sqlite:///{tmp_path / 'never-opened.db'}")
    door = engine._door  # the test looks at the wiring itself
    assert isinstance(door, Door)
    assert [op.__name__ for op in operations if not door.serves(op)] == []
    requests = [
        obj
        for obj in vars(module).values()
        if isinstance(obj, type) and issubclass(obj, ops.Request) and obj is not ops.Request
    ]
    # A family's base class (`WebhookSourceRequest`) is no operation: the requests it
    # declares derive from it.
    declared = {
        obj for obj in requests if not any(o is not obj and issubclass(o, obj) for o in requests)
    }
    assert declared == set(operations)
    return door
