"""Calls made at the same time, each from a thread of its own."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterable
from typing import Any


def in_threads(calls: Iterable[Callable[[], object]], timeout: float | None = None) -> None:
    """Start a thread for each call, then join each (waiting up to `timeout` for it)."""
    threads = [threading.Thread(target=call) for call in calls]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)


def open_and_close_at_once(make_store: Callable[[], Any], n: int, timeout: float) -> None:
    """`n` threads each make a store, wait for the others, then open and close it; none
    of them fails."""
    errors: list[BaseException] = []
    barrier = threading.Barrier(n)

    def open_close() -> None:
        try:
            store = make_store()
            barrier.wait(timeout)
            asyncio.run(store.open())
            asyncio.run(store.close())
        except BaseException as exc:
            errors.append(exc)

    in_threads([open_close] * n, timeout=timeout)
    assert errors == []
