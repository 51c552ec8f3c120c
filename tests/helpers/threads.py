"""Calls made at the same time, each from a thread of its own."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable


def in_threads(calls: Iterable[Callable[[], object]], timeout: float | None = None) -> None:
    """Start a thread for each call, then join each (waiting up to `timeout` for it)."""
    threads = [threading.Thread(target=call) for call in calls]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
