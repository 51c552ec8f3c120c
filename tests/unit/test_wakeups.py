"""Sleeping until woken must never swallow a stop (a cancellation)."""

from __future__ import annotations

import asyncio
import contextlib
import sys

import pytest

from waypost.engine.scheduler import Scheduler


async def _wait_for_sleep(event: asyncio.Event, seconds: float) -> None:
    # What the engine did before: asyncio.wait_for, which on Python 3.11 returns the
    # inner result when the cancellation and the wake-up land in the same iteration.
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), seconds)


def _cancelled_as_woken(sleep: object) -> bool:
    async def main() -> bool:
        event = asyncio.Event()
        task = asyncio.create_task(sleep(event, 10))  # type: ignore[operator]
        await asyncio.sleep(0)  # the task now waits
        event.set()
        task.cancel()  # a stop, at the very moment of a wake-up
        try:
            await task
        except asyncio.CancelledError:
            return True
        return False

    return asyncio.run(main())


def test_a_stop_that_comes_with_a_wake_up_is_not_lost() -> None:
    assert _cancelled_as_woken(Scheduler._sleep)


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="the wait_for race is Python 3.11's")
def test_the_race_is_real_with_wait_for() -> None:
    assert not _cancelled_as_woken(_wait_for_sleep)


def test_a_timeout_still_ends_the_sleep() -> None:
    async def main() -> None:
        await Scheduler._sleep(asyncio.Event(), 0.01)

    asyncio.run(main())
