"""Waiting for something another thread or process brings about, with a deadline."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import waypost as wp

from .history import of_type

T = TypeVar("T")


def eventually(
    check: Callable[[], T], what: str = "condition", timeout: float = 10.0, interval: float = 0.01
) -> T:
    """Poll `check` every `interval` seconds until it returns something truthy (which it
    returns); fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


async def eventually_async(
    check: Callable[[], Awaitable[T] | T],
    what: str = "condition",
    timeout: float = 10.0,
    interval: float = 0.01,
) -> T:
    """`eventually` on an event loop: `check` may be a coroutine function, and the loop
    goes on between polls."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = check()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value  # type: ignore[return-value]
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}: {value!r}")
        await asyncio.sleep(interval)


async def run_reaches(
    run: wp.AsyncRunHandle, ok: Callable[[wp.RunInfo], bool], timeout: float = 10.0
) -> wp.RunInfo:
    """Poll the run until `ok` holds of its info (which it returns); fail after `timeout`
    seconds, saying where the run was."""
    seen: list[wp.RunInfo] = []

    async def reached() -> wp.RunInfo | None:
        seen.append(await run.get())
        return seen[-1] if ok(seen[-1]) else None

    try:
        return await eventually_async(reached, f"run {run.run_id}", timeout)
    except AssertionError:
        info = seen[-1]
        raise AssertionError(f"run {run.run_id} is {info.status}: {info.waiting_for}") from None


def until_event(
    engine: wp.Engine, run_id: str, type_: str, what: str, timeout: float = 10.0
) -> list[wp.Event]:
    """Poll the run's history until it holds events of `type_` (which it returns); fail
    after `timeout` seconds, saying it waited for `what`."""
    return eventually(lambda: of_type(engine.history(run_id), type_), what, timeout)
