"""The event loop a workflow's code runs on: a ready queue, no clock, no I/O.

`WorkflowLoop` is stepped by hand by its instance (`run_ready`): `call_soon`
appends to a ready queue; there are no OS timers (an asyncio timer inside a
workflow is an error: it would not survive a crash) and no threads. Its
`time()` is the time of the event being handled. Each asyncio task remembers
its step path, so the operations of a task created as step 4 number 4.1, 4.2.
"""

from __future__ import annotations

import asyncio
import contextvars
import os
import sys
from collections import deque
from collections.abc import Callable
from datetime import timedelta
from typing import Any, Protocol

from waypost.errors import WorkflowError

# Frames in waypost's own code and in asyncio are skipped when naming the caller.
_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_ASYNCIO_DIR = os.path.dirname(os.path.abspath(asyncio.__file__))


class LoopHost(Protocol):
    """What the loop needs of the instance that steps it."""

    activation_time: float
    closed: bool
    # Called before each callback while set: raises to stop code that ran past its CPU
    # time (the compute lane's limit). The callbacks left are dropped with the instance.
    cpu_check: Callable[[], None] | None

    def next_step(self) -> str:
        """The next step id of the current task."""
        ...

    def fail_from_callback(self, exc: BaseException) -> None:
        """A callback of the workflow's code raised `exc`."""
        ...


_SITES: dict[tuple[Any, int], str] = {}


def call_site() -> str:
    """`file.py:line` of the workflow code that called into the context."""
    frame: Any = sys._getframe(2)
    while frame is not None:
        code = frame.f_code
        key = (code, frame.f_lineno)
        site = _SITES.get(key)
        if site is not None:
            return site
        filename = code.co_filename
        if not (filename.startswith(_PKG_DIR) or filename.startswith(_ASYNCIO_DIR)):
            site = f"{os.path.basename(filename)}:{frame.f_lineno}"
            if len(_SITES) < 100_000:
                _SITES[key] = site
            return site
        frame = frame.f_back
    return "?"


def as_seconds(duration: timedelta | float | int) -> float:
    if isinstance(duration, timedelta):
        return duration.total_seconds()
    if isinstance(duration, int | float) and not isinstance(duration, bool):
        return float(duration)
    raise TypeError(f"a duration must be a timedelta or a number of seconds, got {duration!r}")


class _Call:
    """A ready callback: what `asyncio.Handle` is, without its debug machinery."""

    __slots__ = ("_args", "_callback", "_cancelled", "_context")

    def __init__(
        self,
        callback: Callable[..., Any],
        args: tuple[Any, ...],
        context: contextvars.Context | None,
    ) -> None:
        self._callback = callback
        self._args = args
        self._context = context
        self._cancelled = False

    def cancel(self) -> None:
        self._cancelled = True

    def cancelled(self) -> bool:
        return self._cancelled


class WorkflowLoop(asyncio.AbstractEventLoop):
    """An event loop with a ready queue and nothing else; stepped by the instance."""

    def __init__(self, host: LoopHost) -> None:
        self._ready: deque[_Call] = deque()
        self._host = host
        self._task_paths: dict[asyncio.Task[Any], str] = {}

    # -- what asyncio needs of a loop ------------------------------------
    def call_soon(  # type: ignore[override]
        self, callback: Callable[..., Any], *args: Any, context: contextvars.Context | None = None
    ) -> _Call:
        call = _Call(callback, args, context)
        self._ready.append(call)
        return call

    def call_later(self, *args: Any, **kwargs: Any) -> asyncio.TimerHandle:  # type: ignore[override]
        raise WorkflowError(
            "asyncio timers (asyncio.sleep with a delay, wait_for, timeout) are not durable "
            "inside a workflow; use ctx.sleep(), or the timeout= of wait_signal/wait_condition"
        )

    call_at = call_later  # type: ignore[assignment]

    def call_soon_threadsafe(self, *args: Any, **kwargs: Any) -> asyncio.Handle:  # type: ignore[override]
        raise WorkflowError("workflow code must not use threads")

    def time(self) -> float:
        return self._host.activation_time

    def create_future(self) -> asyncio.Future[Any]:
        return asyncio.Future(loop=self)

    def create_task(
        self, coro: Any, *, name: str | None = None, context: contextvars.Context | None = None
    ) -> asyncio.Task[Any]:
        path = self._host.next_step() + "."
        task: asyncio.Task[Any] = asyncio.Task(coro, loop=self, name=name, context=context)
        self._task_paths[task] = path
        task.add_done_callback(self._forget)
        return task

    def _forget(self, task: asyncio.Task[Any]) -> None:
        self._task_paths.pop(task, None)

    def get_debug(self) -> bool:
        return False

    def is_running(self) -> bool:
        return True

    def is_closed(self) -> bool:
        return False

    def get_exception_handler(self) -> None:
        return None

    def call_exception_handler(self, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if exc is not None and not self._host.closed:
            self._host.fail_from_callback(exc)

    def default_exception_handler(self, context: dict[str, Any]) -> None:
        self.call_exception_handler(context)

    # -- stepping ----------------------------------------------------------
    def run_ready(self) -> None:
        previous = asyncio.events._get_running_loop()
        asyncio.events._set_running_loop(self)
        try:
            ready = self._ready
            check = self._host.cpu_check
            while ready:
                if check is not None:
                    check()
                call = ready.popleft()
                if call._cancelled:
                    continue
                try:
                    if call._context is not None:
                        call._context.run(call._callback, *call._args)
                    else:
                        call._callback(*call._args)
                except (SystemExit, KeyboardInterrupt):
                    raise
                except BaseException as exc:
                    self.call_exception_handler({"message": "callback failed", "exception": exc})
        finally:
            asyncio.events._set_running_loop(previous)

    @property
    def has_ready(self) -> bool:
        return bool(self._ready)

    def clear(self) -> None:
        """Drop every ready callback: the code is abandoned, not resumed."""
        self._ready.clear()

    def set_task_path(self, task: asyncio.Task[Any], path: str) -> None:
        self._task_paths[task] = path

    def task_path(self) -> str:
        task = asyncio.current_task(self)
        if task is None:
            return "h."  # signal handlers and callbacks outside any task
        return self._task_paths.get(task, "")


class StepFuture(asyncio.Future[Any]):
    """The future of a step; cancelling it records the step's cancellation at once."""

    def __init__(self, loop: WorkflowLoop, on_cancel: Callable[[], None]) -> None:
        super().__init__(loop=loop)
        self._on_cancel = on_cancel
        self.skipped = False  # an operator skipped the step: its result is the output given

    def cancel(self, msg: Any | None = None) -> bool:
        if not super().cancel(msg):
            return False
        self._on_cancel()
        return True


class Pending:
    """A wait of the workflow code: its future, what it waits for, and where it was made."""

    __slots__ = ("extra", "future", "hint", "name", "site")

    def __init__(
        self, future: asyncio.Future[Any], name: str, hint: Any, site: str, extra: Any = None
    ):
        self.future = future
        self.name = name
        self.hint = hint
        self.site = site
        self.extra = extra
