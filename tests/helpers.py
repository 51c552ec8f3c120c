"""Small helpers shared by the tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import waypost as wp

T = TypeVar("T")


def eventually(check: Callable[[], T], what: str = "condition", timeout: float = 10.0) -> T:
    """Poll `check` until it returns something truthy; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.01)


def of_type(events: list[wp.Event], type_: str) -> list[wp.Event]:
    return [e for e in events if e.type == type_]
