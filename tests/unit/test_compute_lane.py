"""The compute lane: tenants' expensive work off the event loop, by fair share, timed."""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

import waypost as wp
from waypost.engine.compute import ComputeLane, Recent, check_cpu

pytestmark = pytest.mark.timeout(60)


def in_a_loop(test: Callable[[], Coroutine[Any, Any, None]]) -> Callable[[], None]:
    """Run an async test in an event loop of its own."""

    @functools.wraps(test)
    def run() -> None:
        asyncio.run(test())

    return run


def burn(seconds: float) -> None:
    """Use `seconds` of this thread's CPU."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def job(order: list[str], name: str, *, gate: threading.Event | None = None) -> Callable[[], str]:
    def run() -> str:
        if gate is not None:
            assert gate.wait(10)
        order.append(name)
        burn(0.02)
        return name

    return run


@in_a_loop
async def test_the_tenant_that_used_the_least_cpu_lately_goes_first() -> None:
    lane = ComputeLane(threads=1)
    order: list[str] = []
    gate = threading.Event()
    try:
        first = asyncio.ensure_future(lane.run("a", job(order, "a1", gate=gate), what="a1"))
        await asyncio.sleep(0)  # a1 is taken and waits for the gate
        rest = [asyncio.ensure_future(lane.run("a", job(order, f"a{i}"), what="")) for i in (2, 3)]
        light = asyncio.ensure_future(lane.run("b", job(order, "b1"), what="b1"))
        await asyncio.sleep(0.05)
        gate.set()
        assert await asyncio.gather(first, *rest, light) == ["a1", "a2", "a3", "b1"]
    finally:
        lane.close()
    # b asked after a's three, yet went second: a had used CPU, b none.
    assert order == ["a1", "b1", "a2", "a3"]


@in_a_loop
async def test_one_tenant_takes_at_most_half_the_threads() -> None:
    lane = ComputeLane(threads=2)
    running: dict[str, int] = {}
    most: dict[str, int] = {}
    lock = threading.Lock()
    release = threading.Event()

    def work(tenant: str) -> Callable[[], None]:
        def run() -> None:
            with lock:
                running[tenant] = running.get(tenant, 0) + 1
                most[tenant] = max(most.get(tenant, 0), running[tenant])
            assert release.wait(10)
            with lock:
                running[tenant] -= 1

        return run

    try:
        tasks = [asyncio.ensure_future(lane.run("a", work("a"), what="")) for _ in range(3)]
        tasks.append(asyncio.ensure_future(lane.run("b", work("b"), what="")))

        async def both_running() -> None:
            while True:
                if running.get("a") == 1 and running.get("b") == 1:
                    return
                await asyncio.sleep(0.01)

        await asyncio.wait_for(both_running(), 10)  # b is not kept behind a's three
        release.set()
        await asyncio.gather(*tasks)
    finally:
        lane.close()
    assert most == {"a": 1, "b": 1}


@in_a_loop
async def test_a_call_past_its_cpu_limit_is_stopped() -> None:
    lane = ComputeLane(cpu_limit=0.05)

    def forever() -> None:
        while True:
            check_cpu("looping")

    try:
        with pytest.raises(wp.ComputeLimitExceeded, match=r"looping took more than 0\.05 s"):
            await lane.run("a", forever, what="looping")
        # The lane goes on with the next call.
        assert await lane.run("a", lambda: 42, what="answer") == 42
    finally:
        lane.close()


@in_a_loop
async def test_a_tenants_callers_are_refused_past_max_waiting_and_the_engine_is_not() -> None:
    lane = ComputeLane(threads=1, max_waiting=2)
    gate = threading.Event()
    try:
        held = [
            asyncio.ensure_future(lane.run("a", gate.wait, what="", asked=True)) for _ in range(2)
        ]
        await asyncio.sleep(0)
        with pytest.raises(wp.QuotaExceeded) as refused:
            await lane.run("a", lambda: None, what="", asked=True)
        assert refused.value.quota == "max_compute_waiting"
        assert refused.value.retry_after == 1.0
        # Another tenant's callers, and the engine's own work, still get in.
        other = asyncio.ensure_future(lane.run("b", lambda: "b", what="", asked=True))
        own = asyncio.ensure_future(lane.run("a", lambda: "own", what=""))
        gate.set()
        assert await asyncio.gather(*held, other, own) == [True, True, "b", "own"]
        # Answered calls no longer count.
        assert await lane.run("a", lambda: "again", what="", asked=True) == "again"
    finally:
        lane.close()


@in_a_loop
async def test_a_call_given_up_before_it_started_never_runs() -> None:
    lane = ComputeLane(threads=1)
    gate = threading.Event()
    ran: list[str] = []
    try:
        first = asyncio.ensure_future(lane.run("a", gate.wait, what=""))
        await asyncio.sleep(0)
        dropped = asyncio.ensure_future(lane.run("a", lambda: ran.append("dropped"), what=""))
        await asyncio.sleep(0)
        dropped.cancel()
        await asyncio.gather(dropped, return_exceptions=True)  # the caller has given up
        gate.set()
        await first
        assert await lane.run("a", lambda: ran.append("next"), what="") is None
    finally:
        lane.close()
    assert ran == ["next"]


def test_recent_keeps_the_newest_answers_within_its_count_and_size() -> None:
    recent: Recent[str, str] = Recent(count=2, max_bytes=80)
    recent.put("a", "A", 10)
    recent.put("b", "B", 10)
    assert recent.get("a") == "A"  # a is now the newest
    recent.put("c", "C", 10)
    assert (recent.get("a"), recent.get("b"), recent.get("c")) == ("A", None, "C")
    recent.put("big", "X", 11)  # more than an eighth of the bound: not kept
    assert recent.get("big") is None
