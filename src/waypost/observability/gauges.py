"""Gauges read from the database when Prometheus scrapes: runs by status, queues, and
schedules by state.

A few grouped statements, at most every `ttl` seconds however often (and by however many
scrapers) the process is asked: a scrape within the `ttl` answers the last reading. The
database is read on the engine's event loop: `refresh()` there (the server's /metrics
route), or from another thread (a worker's metrics port) by handing `refresh()` to that
loop. If the database does not answer, the gauges are left out of the scrape (a stale
count would look true) and `waypost_gauges_up` says 0.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from waypost.model.logs import logger
from waypost.store import Store
from waypost.store.base import QueueGauge, RunCount
from waypost.store.queues import QueueLoad
from waypost.store.schedules import ScheduleCount

log = logger("waypost.metrics")
_WAIT = 10.0  # seconds a scrape from another thread waits for the database


class StoreGauges(Collector):
    """The gauges of `store` (times by `clock`, the engine's), read at most every `ttl` s."""

    def __init__(self, store: Store, clock: Callable[[], float], ttl: float = 2.0) -> None:
        self.store = store
        self.clock = clock
        self.ttl = ttl
        self.loop: asyncio.AbstractEventLoop | None = None  # where the store is read
        self.runs: list[RunCount] = []
        self.queues: list[QueueGauge] = []
        self.loads: list[QueueLoad] = []
        self.schedules: list[ScheduleCount] = []
        self.read_at: float | None = None  # monotonic; None: never, or the last read failed
        self.now = 0.0  # the engine's time of the last reading
        self._reading: asyncio.Lock | None = None

    def fresh(self) -> bool:
        return self.read_at is not None and time.monotonic() - self.read_at < self.ttl

    async def refresh(self) -> None:
        """Read the database unless the last reading is younger than `ttl`."""
        self.loop = asyncio.get_running_loop()
        if self._reading is None:
            self._reading = asyncio.Lock()
        async with self._reading:  # concurrent scrapes share one reading
            if self.fresh():
                return
            now = self.clock()
            try:
                runs = await self.store.run_counts()
                queues = await self.store.queue_gauges(now)
                loads = await self.store.queue_loads(now)
                schedules = await self.store.schedule_counts()
            except Exception as exc:
                log.warning("metrics: reading the database failed: %s", exc)
                self.read_at = None
                return
            self.runs, self.queues, self.loads, self.now = runs, queues, loads, now
            self.schedules = schedules
            self.read_at = time.monotonic()

    def refresh_from_thread(self) -> None:
        """`refresh()` on the engine's loop, from a thread that is not running it."""
        loop = self.loop
        if loop is None or loop.is_closed() or self.fresh():
            return
        try:
            asyncio.run_coroutine_threadsafe(self.refresh(), loop).result(_WAIT)
        except Exception as exc:
            log.warning("metrics: reading the database failed: %s", exc)
            self.read_at = None

    def describe(self) -> list[Metric]:
        return list(self._families(with_samples=False))

    def collect(self) -> Iterator[Metric]:
        loop = self.loop
        if loop is not None and not _running_in(loop):
            self.refresh_from_thread()
        return self._families(with_samples=True)

    def _families(self, with_samples: bool) -> Iterator[Metric]:
        up = GaugeMetricFamily(
            "waypost_gauges_up", "1 if the last reading of the database for gauges worked."
        )
        ok = self.read_at is not None
        if with_samples:
            up.add_metric([], 1.0 if ok else 0.0)
        yield up
        runs = GaugeMetricFamily(
            "waypost_runs",
            "Runs in the database by tenant, workflow and status.",
            labels=["tenant", "workflow", "status"],
        )
        depth = GaugeMetricFamily(
            "waypost_queue_depth",
            "Tasks due and not claimed, by tenant, queue and kind (workflow, activity).",
            labels=["tenant", "queue", "kind"],
        )
        age = GaugeMetricFamily(
            "waypost_queue_oldest_age_seconds",
            "How long the oldest due, unclaimed task of the queue has waited.",
            labels=["tenant", "queue", "kind"],
        )
        if with_samples and ok:
            for r in self.runs:
                runs.add_metric([r.tenant, r.workflow, r.status], r.runs)
            for q in self.queues:
                key = [q.tenant, q.queue, q.kind]
                depth.add_metric(key, q.depth)
                age.add_metric(key, max(0.0, self.now - q.oldest_visible_at))
        running = GaugeMetricFamily(
            "waypost_queue_running",
            "Tasks leased (running), by tenant, queue and kind (workflow, activity).",
            labels=["tenant", "queue", "kind"],
        )
        named = {
            "depth": GaugeMetricFamily(
                "waypost_named_queue_depth",
                "Activity attempts due and not claimed, by tenant and named queue.",
                labels=["tenant", "queue"],
            ),
            "running": GaugeMetricFamily(
                "waypost_named_queue_running",
                "Activity attempts leased (running), by tenant and named queue.",
                labels=["tenant", "queue"],
            ),
            "age": GaugeMetricFamily(
                "waypost_named_queue_oldest_age_seconds",
                "How long the oldest due, unclaimed attempt of the named queue has waited.",
                labels=["tenant", "queue"],
            ),
        }
        if with_samples and ok:
            for load in self.loads:
                if not load.named:
                    running.add_metric([load.tenant, load.queue, load.kind], load.running)
                    continue
                named["depth"].add_metric([load.tenant, load.queue], load.depth)
                named["running"].add_metric([load.tenant, load.queue], load.running)
                if load.oldest_visible_at is not None:
                    seconds = max(0.0, self.now - load.oldest_visible_at)
                    named["age"].add_metric([load.tenant, load.queue], seconds)
        schedules = GaugeMetricFamily(
            "waypost_schedules",
            "Schedules by tenant and state (active, buffered, paused).",
            labels=["tenant", "state"],
        )
        if with_samples and ok:
            for c in self.schedules:
                schedules.add_metric([c.tenant, c.state], c.schedules)
        yield runs
        yield schedules
        yield depth
        yield age
        yield running
        yield from named.values()


def _running_in(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False
