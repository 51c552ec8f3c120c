"""The deterministic workflow runtime: history and time in, commands out.

A workflow coroutine runs on its own event loop (`_WorkflowLoop`) that the
engine steps by hand: `call_soon` appends to a ready queue, there are no OS
timers and no I/O. The instance is fed one event at a time and run until
every task is blocked; what the code asked for meanwhile (activities, timers,
markers, cancellations) comes out as new events for the engine to commit.

Replay feeds a run's history through the same path. Commands the code issues
are matched by step id against the commands the history records; a step id
is the position of the operation within its asyncio task (`"3"`, or `"4.2"`
for the second operation of the task spawned as operation 4), so the order
in which parallel branches complete never changes which id a step gets.

Decisions kept here:
- Each event is applied on its own and the code runs until quiescent before
  the next one, live and in replay alike, so both see the same interleaving.
- The store records the last event the code has processed
  (`processed_seq`). While replaying events up to it, a command missing from
  history, a different command under the same step id, or a recorded command
  the code no longer issues is non-determinism: the run is suspended with
  both sides named, never advanced.
- `patched()` markers are keyed by change id, not by step id, so adding a
  `patched()` call does not shift the ids of the steps after it.
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import os
import sys
import traceback
import uuid as uuid_mod
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import waypost
from waypost.errors import (
    ActivityError,
    ConfigurationError,
    NondeterminismError,
    PayloadError,
    UnknownActivity,
    WaitTimeout,
    WorkflowError,
)
from waypost.model import approvals as ap
from waypost.model.codec import Codec, error_to_json
from waypost.model.events import COMMAND_EVENTS, Event, EventType, NewEvent
from waypost.model.retry import Retry
from waypost.model.status import RunStatus

from .context import WorkflowContext
from .registry import DEFAULT_ACTIVITY_TIMEOUT, ActivityDefn, WorkflowDefn

_PKG_DIR = os.path.dirname(os.path.abspath(waypost.__file__))
_ASYNCIO_DIR = os.path.dirname(os.path.abspath(asyncio.__file__))
_E = EventType
# The defaults of an activity scheduled by name that this process has not registered.
_UNREGISTERED_SPEC: dict[str, Any] = {
    "retry": Retry().to_json(),
    "timeout": DEFAULT_ACTIVITY_TIMEOUT.total_seconds(),
}


def idempotency_key(tenant: str, run_id: str, step_id: str) -> str:
    """The key every attempt of one step carries, for downstream deduplication."""
    digest = hashlib.sha256(f"{tenant}\x00{run_id}\x00{step_id}".encode()).hexdigest()
    return f"wp-{digest[:40]}"


_SITES: dict[tuple[Any, int], str] = {}


def _call_site() -> str:
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


def _seconds(duration: timedelta | float | int) -> float:
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


class _WorkflowLoop(asyncio.AbstractEventLoop):
    """An event loop with a ready queue and nothing else; stepped by the instance."""

    def __init__(self, instance: WorkflowInstance) -> None:
        self._ready: deque[_Call] = deque()
        self._instance = instance
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
        return self._instance.activation_time

    def create_future(self) -> asyncio.Future[Any]:
        return asyncio.Future(loop=self)

    def create_task(
        self, coro: Any, *, name: str | None = None, context: contextvars.Context | None = None
    ) -> asyncio.Task[Any]:
        path = self._instance._next_step() + "."
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
        if exc is not None and not self._instance.closed:
            self._instance._fail_from_callback(exc)

    def default_exception_handler(self, context: dict[str, Any]) -> None:
        self.call_exception_handler(context)

    # -- stepping ----------------------------------------------------------
    def run_ready(self) -> None:
        previous = asyncio.events._get_running_loop()
        asyncio.events._set_running_loop(self)
        try:
            ready = self._ready
            while ready:
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

    def task_path(self) -> str:
        task = asyncio.current_task(self)
        if task is None:
            return "h."  # signal handlers and callbacks outside any task
        return self._task_paths.get(task, "")


class _StepFuture(asyncio.Future[Any]):
    """The future of a step; cancelling it records the step's cancellation at once."""

    def __init__(self, loop: _WorkflowLoop, on_cancel: Callable[[], None]) -> None:
        super().__init__(loop=loop)
        self._on_cancel = on_cancel

    def cancel(self, msg: Any | None = None) -> bool:
        if not super().cancel(msg):
            return False
        self._on_cancel()
        return True


class _Pending:
    __slots__ = ("extra", "future", "hint", "name", "site")

    def __init__(
        self, future: asyncio.Future[Any], name: str, hint: Any, site: str, extra: Any = None
    ):
        self.future = future
        self.name = name
        self.hint = hint
        self.site = site
        self.extra = extra


class WorkflowInstance:
    """One run's workflow code, live in memory, fed events one at a time."""

    def __init__(
        self,
        *,
        workflow: WorkflowDefn,
        activities: Mapping[str, ActivityDefn],
        codec: Codec,
        tenant: str,
        run_id: str,
        clock: Callable[[], float],
    ) -> None:
        self.workflow = workflow
        self.activities = activities
        self.codec = codec
        self.tenant = tenant
        self.run_id = run_id
        self._clock = clock
        self._loop = _WorkflowLoop(self)  # type: ignore[abstract]
        self._counters: dict[str, int] = {}
        self.context = WorkflowContext(self)

        self.last_seq = 0  # the last event of the history this instance has seen
        self.last_hash = ""
        self.processed_seq = 0  # the last event the code has been fed
        self.activation_time = 0.0
        self.current_seq = 0
        self.current_type = ""
        self.replaying = False
        self.closed = False

        self._recorded: dict[str, Event] = {}  # step id -> command event (primary)
        self._recorded_cancels: dict[str, Event] = {}
        self._recorded_patches: dict[str, Event] = {}
        self._matched: set[int] = set()
        self._patches: dict[str, bool] = {}

        self._activities: dict[str, _Pending] = {}
        self._timers: dict[str, _Pending] = {}
        self._approvals: dict[str, _Pending] = {}
        self._fire_at: dict[str, float] = {}
        self.started_by: str | None = None
        self._signal_waiters: dict[str, deque[_Pending]] = {}
        self._signal_buffer: dict[str, deque[Any]] = {}
        self._handlers: dict[str, tuple[Callable[[Any], Any], Any]] = {}
        self._conditions: list[tuple[Callable[[], bool], asyncio.Future[bool], str]] = []
        self._migrate_handler: Callable[[dict[str, Any]], None] | None = None
        self.site_label: str | None = None  # names the caller when it is not user code

        self._root: asyncio.Task[Any] | None = None
        self._commands: list[NewEvent] = []
        self.outcome: NewEvent | None = None
        self.cancel_requested = False
        self._cancel_reason = ""
        self._callback_error: BaseException | None = None
        self.nondeterminism: NondeterminismError | None = None

    # == feeding the instance ==============================================
    def replay(self, history: Sequence[Event], processed_seq: int) -> None:
        """Rebuild the code's state from a history; raises NondeterminismError."""
        self.processed_seq = processed_seq
        for ev in history:
            if ev.type in COMMAND_EVENTS:
                step = str(ev.data.get("step"))
                if ev.type == _E.MARKER_RECORDED and ev.data.get("kind") == "patch":
                    self._recorded_patches[ev.data["change_id"]] = ev
                elif ev.type in (
                    _E.ACTIVITY_CANCEL_REQUESTED,
                    _E.TIMER_CANCELLED,
                    _E.APPROVAL_CLOSED,
                    _E.APPROVAL_ESCALATED,
                ):
                    self._recorded_cancels[step] = ev
                else:
                    self._recorded[step] = ev
        checked = False
        for ev in history:
            if not checked and ev.seq > processed_seq:
                self._check_all_matched()
                checked = True
            self._apply(ev)
            if self.nondeterminism is not None:
                raise self.nondeterminism
        if not checked:
            self._check_all_matched()
        if history:
            self.last_seq, self.last_hash = history[-1].seq, history[-1].hash

    def apply_new(self, ev: Event) -> None:
        """Feed one event the code has not seen yet (live)."""
        self._apply(ev)
        self.last_seq, self.last_hash = ev.seq, ev.hash
        if self.nondeterminism is not None:
            raise self.nondeterminism

    def take_commands(self) -> list[NewEvent]:
        out = self._commands
        self._commands = []
        if self.outcome is not None:
            out.append(self.outcome)
        return out

    @property
    def finished(self) -> bool:
        return self.outcome is not None

    @property
    def asking(self) -> bool:
        """Whether an approval is still open (a run that ends now must close it)."""
        return bool(self._approvals)

    def snapshot(self) -> tuple[RunStatus, list[dict[str, Any]]]:
        """The run's status and what it waits for, as of the last event fed."""
        waiting: list[dict[str, Any]] = []
        for step, p in self._activities.items():
            waiting.append({"kind": "activity", "step": step, "activity": p.name, "site": p.site})
        for step, p in self._timers.items():
            entry = {"kind": "timer", "step": step, "until": p.name, "site": p.site}
            if p.extra is not None:
                entry["purpose"] = p.extra
            waiting.append(entry)
        for step, p in self._approvals.items():
            waiting.append(
                {"kind": "approval", "step": step, "name": p.name, "approval_id": p.extra}
            )
        for name, waiters in self._signal_waiters.items():
            if waiters:
                waiting.append({"kind": "signal", "name": name})
        for _, fut, site in self._conditions:
            if not fut.done():
                waiting.append({"kind": "condition", "site": site})
        status = RunStatus.RUNNING if self._activities else RunStatus.WAITING
        return status, waiting

    def close(self) -> None:
        """Drop the instance; its coroutines are abandoned, not resumed."""
        self.closed = True
        self._loop._ready.clear()

    def _decode(self, data: Any, hint: Any) -> Any:
        """Decode a stored payload; any failure (also a custom codec's) is a PayloadError."""
        try:
            return self.codec.decode(data, hint)
        except PayloadError:
            raise
        except Exception as exc:
            raise PayloadError(f"cannot decode {data!r} as {hint}: {exc}") from exc

    @property
    def _handling(self) -> str:
        return f"event {self.current_seq} ({self.current_type})"

    # == applying events ====================================================
    def _apply(self, ev: Event) -> None:
        self.current_seq = ev.seq
        self.current_type = str(ev.type)
        self.replaying = ev.seq <= self.processed_seq
        self.activation_time = ev.ts
        t = ev.type
        d = ev.data
        if t == _E.RUN_STARTED:
            self._start(d)
        elif t == _E.ACTIVITY_COMPLETED:
            p = self._activities.pop(d["step"], None)
            if p is not None and not p.future.done():
                try:
                    p.future.set_result(self._decode(d.get("result"), p.hint))
                except PayloadError as exc:
                    p.future.set_exception(exc)
        elif t == _E.ACTIVITY_FAILED:
            if not d.get("retrying"):
                p = self._activities.pop(d["step"], None)
                if p is not None and not p.future.done():
                    p.future.set_exception(
                        ActivityError(
                            p.name, d["step"], d.get("error") or {}, int(d.get("attempt", 0))
                        )
                    )
        elif t == _E.TIMER_FIRED:
            p = self._timers.pop(d["step"], None)
            if p is not None and not p.future.done():
                p.future.set_result(None)
        elif t == _E.SIGNAL_RECEIVED:
            self._deliver_signal(d["name"], d.get("payload"))
        elif t == _E.APPROVAL_DECIDED:
            if d.get("outcome") not in (ap.APPROVED, ap.REJECTED):
                return  # one vote of several: the code waits on
            p = self._approvals.pop(d["step"], None)
            if p is not None and not p.future.done():
                votes = tuple(
                    ap.Vote(v["principal"], v["decision"], v.get("comment", ""), v.get("at", 0.0))
                    for v in d.get("votes", ())
                )
                p.future.set_result(ap.Decision(d["outcome"], d["approval_id"], votes))
        elif t == _E.RUN_MIGRATED:
            if self._migrate_handler is None:
                self._nondeterministic(
                    f"{self._handling} moves the run to another definition version, "
                    "but this workflow cannot be migrated"
                )
                return
            try:
                self._migrate_handler(d)
            except BaseException as exc:
                self._fail_from_callback(exc)
        elif t == _E.CANCEL_REQUESTED:
            if not self.cancel_requested:
                self.cancel_requested = True
                self._cancel_reason = str(d.get("reason", ""))
                if self._root is not None and not self._root.done():
                    self._root.cancel(self._cancel_reason or None)
        else:
            return  # commands, audit facts and run outcomes change nothing in the code
        self._run_until_quiescent()

    def _start(self, data: dict[str, Any]) -> None:
        self.started_by = data.get("started_by")
        try:
            value = self._decode(data.get("input"), self.workflow.input_hint)
        except PayloadError as exc:
            self._finish_failed(exc)
            return
        fn = self.workflow.fn
        coro = fn(self.context, value) if self.workflow.takes_input else fn(self.context)
        self._root = asyncio.Task(coro, loop=self._loop, name=f"workflow:{self.run_id}")
        self._loop._task_paths[self._root] = ""

    def _run_until_quiescent(self) -> None:
        loop = self._loop
        while True:
            loop.run_ready()
            if self.nondeterminism is not None or self.closed:
                return
            progressed = False
            for cond in list(self._conditions):
                predicate, fut, _ = cond
                if fut.done():
                    self._conditions.remove(cond)
                    continue
                try:
                    ok = bool(predicate())
                except BaseException as exc:  # a broken predicate fails the run
                    self._fail_from_callback(exc)
                    ok = False
                if ok:
                    self._conditions.remove(cond)
                    fut.set_result(False)
                    progressed = True
            if self._callback_error is not None:
                self._finish_failed(self._callback_error)
                return
            if not progressed and not loop._ready:
                break
        root = self._root
        if root is not None and root.done() and self.outcome is None:
            self._finish(root)

    def _finish(self, root: asyncio.Task[Any]) -> None:
        if self.replaying:
            self._nondeterministic(
                f"the workflow function returned while replaying {self._handling}, "
                "but its history goes on"
            )
            return
        if root.cancelled():
            self.outcome = self._event(_E.RUN_CANCELLED, {"reason": self._cancel_reason})
            self._close_open_work()
            return
        exc = root.exception()
        if exc is not None:
            self._finish_failed(exc)
            return
        try:
            result = self.codec.encode(root.result())
        except PayloadError as err:
            self._finish_failed(PayloadError(f"the workflow's result: {err}"))
            return
        if self.cancel_requested:
            self.outcome = self._event(
                _E.RUN_CANCELLED, {"reason": self._cancel_reason, "result": result}
            )
        else:
            self.outcome = self._event(_E.RUN_COMPLETED, {"result": result})
        self._close_open_work()

    def _finish_failed(self, exc: BaseException) -> None:
        if self.outcome is not None:
            return
        tb = "".join(traceback.format_exception(exc))
        self.outcome = self._event(_E.RUN_FAILED, {"error": error_to_json(exc, traceback_text=tb)})
        self._close_open_work()

    def _close_open_work(self) -> None:
        """A finished run leaves no task running: cancel what is still pending."""
        if self._root is not None and not self._root.done():
            self._root.cancel()
        self._activities.clear()
        self._timers.clear()
        self.closed = True
        self._loop._ready.clear()

    def _fail_from_callback(self, exc: BaseException) -> None:
        if isinstance(exc, NondeterminismError):
            self.nondeterminism = exc
        elif self._callback_error is None:
            self._callback_error = exc

    # == signals ============================================================
    def _deliver_signal(self, name: str, payload: Any) -> None:
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
                p.future.set_result(self._decode(payload, p.hint))
            except PayloadError as exc:
                p.future.set_exception(exc)
            return
        self._signal_buffer.setdefault(name, deque()).append(payload)

    def _call_handler(self, handler: tuple[Callable[[Any], Any], Any], payload: Any) -> None:
        fn, hint = handler
        try:
            fn(self._decode(payload, hint))
        except BaseException as exc:
            self._fail_from_callback(exc)

    # == operations the context calls ========================================
    def _next_step(self) -> str:
        path = self._loop.task_path()
        n = self._counters.get(path, 0) + 1
        self._counters[path] = n
        return f"{path}{n}"

    def _event(self, type_: EventType, data: dict[str, Any]) -> NewEvent:
        return NewEvent(type_, data, self._clock())

    def _check_usable(self) -> None:
        if self.closed:
            raise WorkflowError("this workflow instance has finished or been evicted")

    def _nondeterministic(self, message: str) -> NondeterminismError:
        err = NondeterminismError(f"run {self.run_id!r}: {message}")
        if self.nondeterminism is None:
            self.nondeterminism = err
        return err

    def _describe(self, ev: Event) -> str:
        d = ev.data
        what = d.get("activity") or d.get("kind") or ""
        site = f" from {d['site']}" if d.get("site") else ""
        return f"event {ev.seq} ({ev.type}{' ' + what if what else ''}, step {d.get('step')}{site})"

    def _match(self, step: str, type_: EventType, name: str, op: str, site: str) -> Event | None:
        """The recorded command for this step, if any; raises on a mismatch."""
        ev = self._recorded.get(step)
        if ev is None:
            if self.replaying:
                raise self._nondeterministic(
                    f"the code called {op} at {site} (step {step}) while replaying "
                    f"{self._handling}, but the history has no such step"
                )
            return None
        recorded_name = ev.data.get("activity") or ev.data.get("kind") or ""
        if ev.type != type_ or recorded_name != name:
            raise self._nondeterministic(
                f"history {self._describe(ev)} does not match the code: the code called "
                f"{op} at {site} (step {step})"
            )
        if ev.data.get("cause") not in (None, self.current_seq):
            raise self._nondeterministic(
                f"the code called {op} at {site} (step {step}) while handling "
                f"{self._handling}, but history {self._describe(ev)} was issued while "
                f"handling event {ev.data.get('cause')}"
            )
        self._matched.add(ev.seq)
        return ev

    def _check_all_matched(self) -> None:
        for ev in [*self._recorded.values(), *self._recorded_cancels.values()]:
            if ev.seq not in self._matched and (ev.data.get("cause") or 0) <= self.processed_seq:
                raise self._nondeterministic(
                    f"history {self._describe(ev)} was not issued by the code on replay"
                )

    def _command(self, type_: EventType, data: dict[str, Any]) -> None:
        data["cause"] = self.current_seq
        self._commands.append(self._event(type_, data))

    def schedule_activity(
        self,
        ref: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        spec: Mapping[str, Any] | None = None,
    ) -> asyncio.Future[Any]:
        """Schedule an activity; `spec` (timeout, labels for the history, and retry
        fields that refine the registered policy) overrides the registered defaults
        and allows an activity this process has not registered (another worker may
        serve it)."""
        self._check_usable()
        site = self.site_label or _call_site()
        defn: ActivityDefn | None = getattr(ref, "__waypost_activity__", None)
        name = defn.name if defn is not None else ref
        if not isinstance(name, str):
            raise UnknownActivity(
                f"{ref!r} is not an activity; pass an @activity function or its name"
            )
        found = self.activities.get(name)
        if found is None and spec is None:
            known = ", ".join(sorted(self.activities)) or "none"
            raise UnknownActivity(f"no activity named {name!r} is registered (registered: {known})")
        step = self._next_step()
        fut = _StepFuture(self._loop, lambda: self._on_activity_cancelled(step))
        ev = self._match(step, _E.ACTIVITY_SCHEDULED, name, f"ctx.run({name})", site)
        if ev is None:
            base = found.spec if found is not None else _UNREGISTERED_SPEC
            data: dict[str, Any] = {**base, **(spec or {})}
            if spec is not None and "retry" in spec:
                # The call's retry settings refine the activity's policy, field by field.
                data["retry"] = Retry.from_json({**base["retry"], **spec["retry"]}).to_json()
            data.update(
                {
                    "activity": name,
                    "step": step,
                    "args": self.codec.encode(list(args)),
                    "key": idempotency_key(self.tenant, self.run_id, step),
                    "site": site,
                }
            )
            if kwargs:
                data["kwargs"] = self.codec.encode(kwargs)
            self._command(_E.ACTIVITY_SCHEDULED, data)
        hint = found.result_hint if found is not None else Any
        self._activities[step] = _Pending(fut, name, hint, site)
        return fut

    def _on_activity_cancelled(self, step: str) -> None:
        if self.closed:
            return
        p = self._activities.pop(step, None)
        if p is None:
            return
        self._cancel_command(step, _E.ACTIVITY_CANCEL_REQUESTED, "activity", p.site)

    def _cancel_command(self, step: str, type_: EventType, what: str, site: str) -> None:
        happened = f"the code cancelled the {what} of step {step} ({site})"
        self._follow_up(step, type_, {"site": site}, happened)

    def _follow_up(self, step: str, type_: EventType, data: dict[str, Any], happened: str) -> None:
        """Issue a command that ends or changes an earlier one (kept per step for replay)."""
        recorded = self._recorded_cancels.get(step)
        if recorded is not None:
            self._matched.add(recorded.seq)
        elif self.replaying:
            self._nondeterministic(
                f"{happened} while replaying {self._handling}, but the history does not record that"
            )
        else:
            self._command(type_, {"step": step, **data})

    def request_approval(
        self,
        name: str,
        approvers: Any,
        expires_in: timedelta | float | None,
        data: Any,
        escalate_to: str | None = None,
        escalate_after: timedelta | float | None = None,
    ) -> asyncio.Future[ap.Decision]:
        self._check_usable()
        site = self.site_label or _call_site()
        policy = ap.as_policy(approvers)
        if (escalate_to is None) != (escalate_after is None):
            raise ConfigurationError("escalate_to and escalate_after go together")
        step = self._next_step()
        kind = f"approval:{name}"
        fut: asyncio.Future[ap.Decision] = _StepFuture(
            self._loop, lambda: self._on_approval_cancelled(step)
        )
        approval_id = ap.approval_id_for(self.tenant, self.run_id, step)
        ev = self._match(step, _E.APPROVAL_REQUESTED, kind, f"ctx.approval({name!r})", site)
        command: dict[str, Any] | None = None
        if ev is None:
            command = {
                "step": step,
                "kind": kind,
                "name": name,
                "approval_id": approval_id,
                "policy": policy.to_json(),
                "started_by": self.started_by,
                "data": self.codec.encode(data),
                "expires_at": None,
                "timer_step": None,
                "site": site,
            }
            self._command(_E.APPROVAL_REQUESTED, command)
        self._approvals[step] = _Pending(fut, name, None, site, approval_id)
        if expires_in is not None:
            seconds = _seconds(expires_in)
            timer_step, timer = self.start_timer(seconds, site, internal=f"approval({name}) expiry")
            if command is not None:
                command["timer_step"] = timer_step
                command["expires_at"] = self._fire_at[timer_step]

            def on_expiry(_: asyncio.Future[None]) -> None:
                if timer.cancelled() or fut.done():
                    return
                self._approvals.pop(step, None)
                self._close_approval(step, approval_id, ap.EXPIRED, site)
                fut.set_result(ap.Decision(ap.EXPIRED, approval_id))

            timer.add_done_callback(on_expiry)
            fut.add_done_callback(lambda _: timer.cancel() if not timer.done() else None)
        if escalate_to is not None and escalate_after is not None:
            self._escalation(step, approval_id, escalate_to, _seconds(escalate_after), fut, site)
        return fut

    def _escalation(
        self,
        step: str,
        approval_id: str,
        group: str,
        seconds: float,
        fut: asyncio.Future[ap.Decision],
        site: str,
    ) -> None:
        timer_step, timer = self.start_timer(seconds, site, internal=f"escalation to {group}")

        def on_due(_: asyncio.Future[None]) -> None:
            if timer.cancelled() or fut.done():
                return
            self._follow_up(
                timer_step,
                _E.APPROVAL_ESCALATED,
                {"approval_step": step, "approval_id": approval_id, "group": group, "site": site},
                f"the approval of step {step} ({site}) escalated to {group}",
            )

        timer.add_done_callback(on_due)
        fut.add_done_callback(lambda _: timer.cancel() if not timer.done() else None)

    def on_migrate(self, handler: Callable[[dict[str, Any]], None]) -> None:
        """Let `handler` take the run's RunMigrated events (definition runs only)."""
        self._migrate_handler = handler

    def withdraw_approvals(self, status: str) -> None:
        """Close every open approval with `status` (their credentials die)."""
        for step, p in list(self._approvals.items()):
            del self._approvals[step]
            self._close_approval(step, str(p.extra), status, p.site)

    def _on_approval_cancelled(self, step: str) -> None:
        if self.closed:
            return
        p = self._approvals.pop(step, None)
        if p is not None:
            self._close_approval(step, str(p.extra), ap.CANCELLED, p.site)

    def _close_approval(self, step: str, approval_id: str, status: str, site: str) -> None:
        self._follow_up(
            step,
            _E.APPROVAL_CLOSED,
            {"approval_id": approval_id, "status": status, "site": site},
            f"the code closed the approval of step {step} ({site}, {status})",
        )

    def start_timer(
        self, duration: float, site: str, *, internal: str | None = None, at: float | None = None
    ) -> tuple[str, asyncio.Future[None]]:
        """A durable timer (due at `at`, if given); `internal` marks one that backs a timeout."""
        step = self._next_step()
        fut: asyncio.Future[None] = _StepFuture(self._loop, lambda: self._on_timer_cancelled(step))
        ev = self._match(
            step, _E.TIMER_STARTED, "timer", "ctx.sleep" if internal is None else internal, site
        )
        if ev is None:
            fire_at = at if at is not None else self._clock() + duration
            self._command(
                _E.TIMER_STARTED,
                {
                    "step": step,
                    "kind": "timer",
                    "fire_at": fire_at,
                    "duration": duration,
                    "site": site,
                },
            )
        else:
            fire_at = float(ev.data["fire_at"])
        until = datetime.fromtimestamp(fire_at, UTC).isoformat()
        self._timers[step] = _Pending(fut, until, None, site, internal)
        self._fire_at[step] = fire_at
        return step, fut

    def _on_timer_cancelled(self, step: str) -> None:
        if self.closed:
            return
        p = self._timers.pop(step, None)
        if p is not None:
            self._cancel_command(step, _E.TIMER_CANCELLED, "timer", p.site)

    def sleep(self, duration: timedelta | float) -> asyncio.Future[None]:
        self._check_usable()
        seconds = _seconds(duration)
        site = self.site_label or _call_site()
        if seconds <= 0:
            self._next_step()
            fut: asyncio.Future[None] = self._loop.create_future()
            fut.set_result(None)
            return fut
        return self.start_timer(seconds, site)[1]

    def sleep_until(self, at: float) -> asyncio.Future[None]:
        """A durable timer due at `at` (epoch seconds); done at once if that time has passed."""
        self._check_usable()
        site = self.site_label or _call_site()
        if at <= self.activation_time:
            self._next_step()
            fut: asyncio.Future[None] = self._loop.create_future()
            fut.set_result(None)
            return fut
        return self.start_timer(at - self.activation_time, site, at=at)[1]

    def wait_signal(
        self, name: str, timeout: timedelta | float | None, hint: Any
    ) -> asyncio.Future[Any]:
        self._check_usable()
        site = self.site_label or _call_site()
        fut: asyncio.Future[Any] = self._loop.create_future()
        buffered = self._signal_buffer.get(name)
        if buffered:
            payload = buffered.popleft()
            try:
                fut.set_result(self._decode(payload, hint))
            except PayloadError as exc:
                fut.set_exception(exc)
            return fut
        pending = _Pending(fut, name, hint, site)
        self._signal_waiters.setdefault(name, deque()).append(pending)
        if timeout is not None:
            seconds = _seconds(timeout)
            _, timer = self.start_timer(seconds, site, internal=f"wait_signal({name}) timeout")

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

    def _forget_waiter(self, name: str, pending: _Pending) -> None:
        waiters = self._signal_waiters.get(name)
        if waiters and pending in waiters:
            waiters.remove(pending)

    def on_signal(self, name: str, handler: Callable[[Any], Any]) -> None:
        self._check_usable()
        import typing

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

    def wait_condition(
        self, predicate: Callable[[], bool], timeout: timedelta | float | None
    ) -> asyncio.Future[bool]:
        self._check_usable()
        site = self.site_label or _call_site()
        fut: asyncio.Future[bool] = self._loop.create_future()
        if predicate():
            fut.set_result(False)
            return fut
        entry = (predicate, fut, site)
        self._conditions.append(entry)
        if timeout is not None:
            seconds = _seconds(timeout)
            _, timer = self.start_timer(seconds, site, internal="wait_condition timeout")

            def on_timeout(_: asyncio.Future[None]) -> None:
                if not timer.cancelled() and not fut.done():
                    fut.set_result(True)

            timer.add_done_callback(on_timeout)
            fut.add_done_callback(lambda _: timer.cancel() if not timer.done() else None)
        return fut

    def marker(self, kind: str, make: Callable[[], Any]) -> Any:
        self._check_usable()
        site = self.site_label or _call_site()
        step = self._next_step()
        ev = self._match(step, _E.MARKER_RECORDED, kind, f"ctx.{kind}()", site)
        if ev is not None:
            return ev.data["value"]
        value = make()
        self._command(
            _E.MARKER_RECORDED, {"step": step, "kind": kind, "value": value, "site": site}
        )
        return value

    def patched(self, change_id: str) -> bool:
        self._check_usable()
        known = self._patches.get(change_id)
        if known is not None:
            return known
        recorded = self._recorded_patches.get(change_id)
        if recorded is not None:
            self._matched.add(recorded.seq)
            result = True
        elif self.replaying:
            result = False
        else:
            self._command(
                _E.MARKER_RECORDED, {"kind": "patch", "change_id": change_id, "site": _call_site()}
            )
            result = True
        self._patches[change_id] = result
        return result

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.marker("now", self._clock), UTC)

    def random(self) -> float:
        import random as random_mod

        return float(self.marker("random", random_mod.SystemRandom().random))

    def uuid(self) -> uuid_mod.UUID:
        return uuid_mod.UUID(self.marker("uuid", lambda: str(uuid_mod.uuid4())))
