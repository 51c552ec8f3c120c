"""Signals as workflow code sees them: waits, handlers, and waits findable by correlation.

The signals seam of a run: `SignalWaits`, a part the instance owns (given the
instance's `port.InstancePort`), hands signals to the code. A signal goes to its
`on_signal` handler, else to the oldest waiter of its name, else into a buffer the
next wait takes it from. A wait with
`correlate=(key, value)` is also recorded (CorrelationRegistered, a command with
its own step, so replay checks the code asks for the same pair) and withdrawn
when it ends (CorrelationWithdrawn, its follow-up); the store keeps the open
pairs, by which a webhook finds the runs waiting for it.
"""

from __future__ import annotations

import asyncio
import inspect
from collections import deque
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from waypost.errors import (
    InvalidRequest,
    PayloadError,
    WaitTimeout,
    WorkflowError,
)
from waypost.model.events import CorrelationRegistered, CorrelationWithdrawn, EventType
from waypost.model.identity import check_id, preview

from .continuation import step_prefix
from .loop import Pending, as_seconds, call_site
from .port import InstancePort
from .recorded import describe

_E = EventType


def correlation_pair(correlate: Any) -> tuple[str, str]:
    """`(key, value)` of a correlated wait, checked as ids (short, no control characters)."""
    if (
        not isinstance(correlate, tuple | list)
        or len(correlate) != 2
        or not all(isinstance(part, str) for part in correlate)
    ):
        raise WorkflowError(
            f"correlate must be a (key, value) pair of strings, not {preview(correlate)}"
        )
    key, value = correlate
    try:
        return check_id(key, "correlate key"), check_id(value, "correlate value")
    except InvalidRequest as exc:
        raise WorkflowError(str(exc)) from None


class SignalWaits:
    """The signals of one run: its waiters, handlers, unread signals and correlated waits."""

    def __init__(self, port: InstancePort) -> None:
        self._port = port
        self._signal_waiters: dict[str, deque[Pending]] = {}
        self._signal_buffer: dict[str, deque[Any]] = {}
        self._handlers: dict[str, tuple[Callable[[Any], Any], Any]] = {}
        # Open correlated waits: step -> (signal name, key, value).
        self._correlations: dict[str, tuple[str, str, str]] = {}
        self._handler_tasks = 0  # `async def` handlers started: each runs as a task

    def waits(self) -> list[dict[str, Any]]:
        """What the run waits for in signals, for its snapshot."""
        waiting: list[dict[str, Any]] = []
        for name, waiters in self._signal_waiters.items():
            if waiters:
                wait: dict[str, Any] = {"kind": "signal", "name": name}
                for signal, key, value in self._correlations.values():
                    if signal == name:
                        wait["correlate"] = {"key": key, "value": value}
                        break
                waiting.append(wait)
        return waiting

    def unread_signals(self) -> list[dict[str, Any]]:
        """Signals received and not taken in by the code, oldest first within a name."""
        return [
            {"name": name, "payload": payload}
            for name, payloads in self._signal_buffer.items()
            for payload in payloads
        ]

    def signal_names(self) -> list[str]:
        """The signal names the code takes in now: those it waits for, those it handles.
        A signal of another name would be held unread until a wait asks for it."""
        names = {n for n, waiters in self._signal_waiters.items() if waiters}
        names.update(self._handlers)
        return sorted(names)

    def deliver_signal(self, name: str, payload: Any) -> None:
        """Hand a received signal to its handler, else its oldest waiter, else the buffer."""
        handler = self._handlers.get(name)
        if handler is not None:
            self._call_handler(handler, payload)
            return
        waiters = self._signal_waiters.get(name)
        while waiters:
            p = waiters.popleft()
            if p.future.done():
                continue
            try:
                p.future.set_result(self._port.decode(payload, p.hint))
            except PayloadError as exc:
                p.future.set_exception(exc)
            return
        self._signal_buffer.setdefault(name, deque()).append(payload)

    def _call_handler(self, handler: tuple[Callable[[Any], Any], Any], payload: Any) -> None:
        fn, hint = handler
        try:
            value = fn(self._port.decode(payload, hint))
        except BaseException as exc:
            self._port.fail_from_callback(exc)
            return
        if inspect.isawaitable(value):
            self._run_handler(value)

    def _run_handler(self, awaitable: Any) -> None:
        """Run an `async def` handler's call to its end in a task of the run, as the
        workflow's own code runs: its steps are numbered under a path of their own
        (the handlers started before it count, the same on replay), and what it
        raises suspends the run as a bug of the code would."""
        self._handler_tasks += 1
        path = f"{step_prefix(self._port.generation)}h{self._handler_tasks}."

        async def run() -> None:
            await awaitable

        loop = self._port.loop
        task: asyncio.Task[None] = asyncio.Task(run(), loop=loop, name=f"signal-handler:{path}")
        loop.set_task_path(task, path)

        def done(t: asyncio.Task[None]) -> None:
            if self._port.closed or t.cancelled():
                return  # the run ended first
            exc = t.exception()
            if exc is not None:
                self._port.fail_from_callback(exc)

        task.add_done_callback(done)

    def wait_signal(
        self,
        name: str,
        timeout: timedelta | float | None,
        hint: Any,
        correlate: tuple[str, str] | None = None,
    ) -> asyncio.Future[Any]:
        self._port.check_usable()
        site = self._port.site_label or call_site()
        pair = None if correlate is None else correlation_pair(correlate)
        fut: asyncio.Future[Any] = self._port.loop.create_future()
        buffered = self._signal_buffer.get(name)
        if buffered:
            payload = buffered.popleft()
            try:
                fut.set_result(self._port.decode(payload, hint))
            except PayloadError as exc:
                fut.set_exception(exc)
            return fut
        pending = Pending(fut, name, hint, site)
        self._signal_waiters.setdefault(name, deque()).append(pending)
        if pair is not None:
            self._correlate(name, pair, site, fut)
        if timeout is not None:
            seconds = as_seconds(timeout)
            _, timer = self._port.start_timer(
                seconds, site, internal=f"wait_signal({name}) timeout"
            )

            def on_timeout(_: asyncio.Future[None]) -> None:
                if timer.cancelled() or fut.done():
                    return
                fut.set_exception(
                    WaitTimeout(f"no signal {name!r} within {timedelta(seconds=seconds)}")
                )

            timer.add_done_callback(on_timeout)
            fut.add_done_callback(lambda _: timer.cancel() if not timer.done() else None)
        fut.add_done_callback(lambda _: self._forget_waiter(name, pending))
        return fut

    def _correlate(
        self, name: str, pair: tuple[str, str], site: str, fut: asyncio.Future[Any]
    ) -> None:
        """Record that this wait is findable by `pair`; withdraw it when the wait ends.

        The registration is a command (CorrelationRegistered, its own step), so replay
        checks the code asks for the same pair; the withdrawal is its follow-up. A run
        that ends withdraws what it left open in the commit that ends it.
        """
        key, value = pair
        step = self._port.next_step()
        op = f"ctx.wait_signal({name!r}, correlate=({key!r}, {value!r}))"
        ev = self._port.match(step, _E.CORRELATION_REGISTERED, "correlation", op, site)
        if ev is None:
            self._port.command(
                CorrelationRegistered(
                    step=step, kind="correlation", signal=name, key=key, value=value, site=site
                )
            )
        elif ((was := CorrelationRegistered.parse(ev)).signal, was.key, was.value) != (
            name,
            key,
            value,
        ):
            raise self._port.nondeterministic(
                f"history {describe(ev)} does not match the code: the code called {op} at "
                f"{site} (step {step}), the history waited for signal "
                f"{was.signal!r} correlated by ({was.key!r}, {was.value!r})",
                expected=ev,
                code_did=op,
                site=site,
            )
        self._correlations[step] = (name, key, value)

        def withdraw(_: asyncio.Future[Any]) -> None:
            self._correlations.pop(step, None)
            if self._port.closed:
                return  # the run ended: its commit withdraws everything it left
            self._port.follow_up(
                step,
                CorrelationWithdrawn(step=step, site=site),
                f"the wait for signal {name!r} of step {step} ({site}) ended",
            )

        fut.add_done_callback(withdraw)

    def _forget_waiter(self, name: str, pending: Pending) -> None:
        waiters = self._signal_waiters.get(name)
        if waiters and pending in waiters:
            waiters.remove(pending)

    def on_signal(self, name: str, handler: Callable[[Any], Any]) -> None:
        self._port.check_usable()
        import typing

        _check_handler(name, handler)

        try:
            hints = typing.get_type_hints(handler)
            params = [p for p in hints if p != "return"]
            hint = hints[params[0]] if params else Any
        except Exception:
            hint = Any
        self._handlers[name] = (handler, hint)
        buffered = self._signal_buffer.pop(name, None)
        while buffered:
            self._call_handler((handler, hint), buffered.popleft())


def _check_handler(name: str, handler: Callable[[Any], Any]) -> None:
    """Refuse, where the code registers it, a handler that cannot take the payload."""
    if not callable(handler):
        raise WorkflowError(f"the handler of signal {name!r} is not callable: {preview(handler)}")
    try:
        inspect.signature(handler).bind(None)
    except TypeError:
        code = getattr(handler, "__code__", None)
        where = f" ({code.co_filename.rsplit('/', 1)[-1]}:{code.co_firstlineno})" if code else ""
        label = getattr(handler, "__qualname__", None) or preview(handler)
        raise WorkflowError(
            f"the handler of signal {name!r}, {label}{where}, must take one argument "
            "(the signal's payload)"
        ) from None
    except ValueError:
        return  # no signature to read (some builtins): called as it is
