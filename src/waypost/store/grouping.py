"""What the threads that group requests into one transaction share (SQLite's writer,
PostgreSQL's group commit): taking a group from their queue, answering its callers."""

from __future__ import annotations

import asyncio
import queue
from typing import Any, Protocol


class Requests(Protocol):
    def get_nowait(self) -> Any: ...


def group_of(requests: Requests, first: Any, most: int, stop: object) -> tuple[list[Any], bool]:
    """`first` and the requests already waiting behind it, up to `most` in all; and
    whether `stop` was taken from the queue (it ends the group, and is not in it)."""
    group = [first]
    while len(group) < most:
        try:
            nxt = requests.get_nowait()
        except queue.Empty:
            break
        if nxt is stop:
            return group, True
        group.append(nxt)
    return group, False


def settle(future: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:
    """Give a request's caller its outcome (in the caller's event loop), unless the
    caller stopped waiting."""
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)
