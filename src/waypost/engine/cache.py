"""Live runs kept in memory between steps, and one lock per run.

The cache is an optimisation only: a run's instance is kept after a commit so
the next event is fed to it instead of replaying the history; `cache_size=0`
gives the same histories, every step replaying from the store.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from waypost.model.events import Event
from waypost.runtime.instance import WorkflowInstance
from waypost.store.base import RunRecord

RunKey = tuple[str, str]  # (tenant, run_id)
Loaded = tuple[RunRecord, list[Event]]  # a run and its history as read from the store


@dataclass(slots=True)
class Live:
    """A cached instance and the workflow task fence it was built under."""

    inst: WorkflowInstance
    fence: int


class LiveRuns:
    """The most recently used runs' instances, at most `size` of them."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._runs: OrderedDict[RunKey, Live] = OrderedDict()

    def __len__(self) -> int:
        return len(self._runs)

    def get(self, key: RunKey) -> Live | None:
        """The run's live instance, marked as just used."""
        live = self._runs.get(key)
        if live is not None:
            self._runs.move_to_end(key)
        return live

    def peek(self, key: RunKey) -> Live | None:
        return self._runs.get(key)

    def put(self, key: RunKey, live: Live) -> None:
        if self.size == 0:
            live.inst.close()
            return
        self._runs[key] = live
        self._runs.move_to_end(key)
        while len(self._runs) > self.size:
            _, old = self._runs.popitem(last=False)
            old.inst.close()

    def evict(self, key: RunKey) -> None:
        live = self._runs.pop(key, None)
        if live is not None:
            live.inst.close()

    def clear(self) -> None:
        for live in self._runs.values():
            live.inst.close()
        self._runs.clear()


class RunLocks:
    """One asyncio lock per run, dropped when nobody holds or waits for it."""

    def __init__(self) -> None:
        self._locks: dict[RunKey, list[Any]] = {}

    async def acquire(self, key: RunKey) -> None:
        entry = self._locks.get(key)
        if entry is None:
            entry = self._locks[key] = [asyncio.Lock(), 0]
        entry[1] += 1
        try:
            await entry[0].acquire()
        except BaseException:
            self._drop(key, entry)
            raise

    def release(self, key: RunKey) -> None:
        entry = self._locks[key]
        entry[0].release()
        self._drop(key, entry)

    def _drop(self, key: RunKey, entry: list[Any]) -> None:
        entry[1] -= 1
        if entry[1] == 0:
            del self._locks[key]
