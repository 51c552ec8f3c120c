"""Labels whose downstream is broken: an activity given a broken label fails, until the
test mends it. Each label is new (a test's own), so tests in parallel never share one."""

from __future__ import annotations

import threading
import uuid

_lock = threading.Lock()
_broken: set[str] = set()


def broken_label() -> str:
    """A new label, broken from the start."""
    name = uuid.uuid4().hex[:12]
    break_label(name)
    return name


def break_label(label: str) -> None:
    with _lock:
        _broken.add(label)


def mend(label: str) -> None:
    with _lock:
        _broken.discard(label)


def is_broken(label: str) -> bool:
    with _lock:
        return label in _broken
