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
import hashlib
import threading
import traceback
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from waypost.errors import (
    ActivityError,
    NondeterminismError,
    PayloadError,
    UnknownActivity,
    WorkflowBug,
    WorkflowError,
)
from waypost.model.codec import Codec, error_to_json
from waypost.model.events import (
    ActivityCancelRequested,
    ActivityScheduled,
    Command,
    Event,
    EventData,
    EventType,
    NewEvent,
    RunCompleted,
    RunFailed,
    TimerCancelled,
    TimerStarted,
)
from waypost.model.retry import Retry
from waypost.model.status import RunStatus

from .approval_waits import ApprovalWaits
from .bugs import MAX_MESSAGE, MAX_TRACEBACK, bounded, is_failure, workflow_bug
from .cancellation import CANCEL_GRACE_STEP, CancelGrace
from .children import ChildRuns
from .context import WorkflowContext
from .continuation import ContinueAsNew, continued, step_prefix
from .loop import Pending, StepFuture, WorkflowLoop, as_seconds, call_site
from .markers import Markers
from .recorded import Recorded, describe
from .registry import DEFAULT_ACTIVITY_TIMEOUT, ActivityDefn, WorkflowDefn
from .repairs import RepairHooks, step_value, voided
from .run_timeout import RUN_TIMEOUT_STEP, RunTimeout
from .signals import SignalWaits
from .updates import Handlers

_E = EventType
T = TypeVar("T")


class InstanceDropped(Exception):
    """The instance was closed while its code ran; what it decided is incomplete."""


# The defaults of an activity scheduled by name that this process has not registered.
_UNREGISTERED_SPEC: dict[str, Any] = {
    "retry": Retry().to_json(),
    "timeout": DEFAULT_ACTIVITY_TIMEOUT.total_seconds(),
}


def idempotency_key(tenant: str, run_id: str, step_id: str) -> str:
    """The key every attempt of one step carries, for downstream deduplication."""
    digest = hashlib.sha256(f"{tenant}\x00{run_id}\x00{step_id}".encode()).hexdigest()
    return f"wp-{digest[:40]}"


class WorkflowInstance:
    """One run's workflow code, live in memory, fed events one at a time.

    It owns its parts, each given the instance as its `port.InstancePort`: `signals`,
    `approvals`, `children`, `handlers` (queries and updates), `cancellation`,
    `repairs`, `markers` and `run_timeout`. Activities, timers and conditions it keeps itself.
    """

    def __init__(
        self,
        *,
        workflow: WorkflowDefn,
        activities: Mapping[str, ActivityDefn],
        codec: Codec,
        tenant: str,
        run_id: str,
        clock: Callable[[], float],
        workflows: Callable[[str, str | None], WorkflowDefn] | None = None,
    ) -> None:
        self.workflow = workflow
        self.workflows = workflows  # finds a child's workflow started by name
        self.activities = activities
        self.codec = codec
        self.tenant = tenant
        self.run_id = run_id
        self._clock = clock
        self._loop = WorkflowLoop(self)  # type: ignore[abstract]
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
        self.cpu_check: Callable[[], None] | None = None  # see LoopHost.cpu_check
        self._busy_in: int | None = None  # the thread `activate` runs the code on
        self._dropped = False  # closed from another thread while `activate` ran

        self._recorded = Recorded()

        self._activities: dict[str, Pending] = {}
        self._timers: dict[str, Pending] = {}
        self._fire_at: dict[str, float] = {}
        self.started_by: str | None = None
        self.started: dict[str, Any] = {}  # RunStarted's data; `generation` in it, if past 1
        self.generation = 1
        self._conditions: list[tuple[Callable[[], bool], asyncio.Future[bool], str]] = []
        self._migrate_handler: Callable[[dict[str, Any]], None] | None = None
        self.site_label: str | None = None  # names the caller when it is not user code

        self._root: asyncio.Task[Any] | None = None
        self._commands: list[NewEvent] = []
        self.outcome: NewEvent | None = None
        self._callback_error: BaseException | None = None
        self.nondeterminism: NondeterminismError | None = None
        self.bug: WorkflowBug | None = None  # raised by the code: the run is suspended

        self.signals = SignalWaits(self)
        self.approvals = ApprovalWaits(self)
        self.children = ChildRuns(self)
        self.handlers = Handlers(self)
        self.cancellation = CancelGrace(self)
        self.repairs = RepairHooks(self)
        self.markers = Markers(self)
        self.run_timeout = RunTimeout(self)

    # == feeding the instance ==============================================
    def replay(self, history: Sequence[Event], processed_seq: int) -> None:
        """Rebuild the code's state from a history; raises NondeterminismError."""
        self.processed_seq = processed_seq
        voided_seqs = voided(history)
        self._recorded.load([ev for ev in history if ev.seq not in voided_seqs])
        checked = False
        for ev in history:
            if not checked and ev.seq > processed_seq:
                self._check_all_matched()
                checked = True
            if ev.seq not in voided_seqs:
                self._apply(ev)
            self._raise_if_stuck()
        if not checked:
            self._check_all_matched()
        if history:
            self.last_seq, self.last_hash = history[-1].seq, history[-1].hash

    def apply_new(self, ev: Event) -> None:
        """Feed one event the code has not seen yet (live)."""
        self._apply(ev)
        self.last_seq, self.last_hash = ev.seq, ev.hash
        self._raise_if_stuck()

    def _raise_if_stuck(self) -> None:
        """Raise what keeps the code from going on: a mismatch with the history, or a bug."""
        if self.nondeterminism is not None:
            raise self.nondeterminism
        if self.bug is not None:
            raise self.bug

    def check_all_issued(self) -> None:
        """Raise NondeterminismError if a command the history records up to the last event
        fed was not issued again by the code (replay checks this up to `processed_seq`)."""
        self.processed_seq = self.last_seq
        self._check_all_matched()

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
        return self.approvals.asking

    @property
    def cancel_requested(self) -> bool:
        return self.cancellation.cancel_requested

    @property
    def grace_until(self) -> float | None:
        """When the cancel grace ends, once its timer is started."""
        return self.cancellation.grace_until

    def unread_signals(self) -> list[dict[str, Any]]:
        return self.signals.unread_signals()

    def signal_names(self) -> list[str]:
        return self.signals.signal_names()

    def answer_query(self, name: str, args: list[Any]) -> Any:
        return self.handlers.answer_query(name, args)

    def validate_update(self, name: str, args: list[Any]) -> None:
        self.handlers.validate_update(name, args)

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
        waiting.extend(self.approvals.waits())
        waiting.extend(self.signals.waits())
        for _, fut, site in self._conditions:
            if not fut.done():
                waiting.append({"kind": "condition", "site": site})
        waiting.extend(self.children.child_waits())
        waiting.extend(self.cancellation.grace_waits())
        status = RunStatus.RUNNING if self._activities else RunStatus.WAITING
        return status, waiting

    def close(self) -> None:
        """Drop the instance; its coroutines are abandoned, not resumed. Safe from another
        thread while `activate` runs: the code stops at its next step and is dropped."""
        if self._busy_in is not None and self._busy_in != threading.get_ident():
            self._dropped = True  # `activate` runs it elsewhere: it drops the code after
            self.closed = True
            return
        self.closed = True
        self._loop.clear()

    def activate(self, fn: Callable[[], T], cpu_check: Callable[[], None] | None) -> T:
        """`fn()`, which feeds this instance, with `cpu_check` called before each step of
        its code (it raises to stop code past its CPU time). Raises `InstanceDropped` if
        the instance was closed from another thread meanwhile: what the code decided is
        then incomplete."""
        self.cpu_check, self._busy_in = cpu_check, threading.get_ident()
        try:
            value = fn()
        finally:
            self.cpu_check, self._busy_in = None, None
            if self._dropped:
                self._loop.clear()
        if self._dropped:
            raise InstanceDropped(f"run {self.run_id}'s code was dropped while it ran")
        return value

    # == what the parts ask of the run (port.InstancePort) =====================
    @property
    def loop(self) -> WorkflowLoop:
        return self._loop

    def clock(self) -> float:
        return self._clock()

    def recorded_command(self, step: str) -> Event | None:
        return self._recorded.command(step)

    def recorded_patch(self, change_id: str) -> Event | None:
        return self._recorded.patch(change_id)

    def timer_due(self, step: str) -> float:
        return self._fire_at[step]

    def end_run(self, outcome: EventData) -> None:
        self.outcome = self._event(outcome)
        self._close_open_work()

    def decode(self, data: Any, hint: Any) -> Any:
        """Decode a stored payload; any failure (also a custom codec's) is a PayloadError."""
        try:
            return self.codec.decode(data, hint)
        except PayloadError:
            raise
        except Exception as exc:
            raise PayloadError(f"cannot decode {data!r} as {hint}: {exc}") from exc

    def encode(self, value: Any) -> Any:
        return self.codec.encode(value)

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
        elif t in (_E.ACTIVITY_COMPLETED, _E.STEP_SKIPPED):
            p = self._activities.pop(d["step"], None)
            if p is not None and not p.future.done():
                try:
                    p.future.set_result(self.decode(step_value(p, t, d), p.hint))
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
            if d["step"] == CANCEL_GRACE_STEP:
                self.cancellation.grace_over()
                return
            if d["step"] == RUN_TIMEOUT_STEP:
                self.run_timeout.expired()
                return
            p = self._timers.pop(d["step"], None)
            if p is not None and not p.future.done():
                p.future.set_result(None)
        elif t == _E.SIGNAL_RECEIVED:
            self.signals.deliver_signal(d["name"], d.get("payload"))
        elif t in (_E.CHILD_COMPLETED, _E.CHILD_FAILED):
            self.children.child_ended(ev)
        elif t == _E.APPROVAL_DECIDED:
            if not self.approvals.decided(d):
                return  # one vote of several: the code waits on
        elif t == _E.RUN_MIGRATED:
            if self._migrate_handler is None:
                self.nondeterministic(
                    f"{self._handling} moves the run to another definition version, "
                    "but this workflow cannot be migrated"
                )
                return
            try:
                self._migrate_handler(d)
            except BaseException as exc:
                self.fail_from_callback(exc)
        elif t == _E.INPUT_UPDATED:
            self.repairs.take_input_update(d)
        elif t == _E.UPDATE_ACCEPTED:
            self.handlers.accept_update(ev)
        elif t == _E.CANCEL_REQUESTED:
            taken = self.cancellation.requested(d)
            if taken and self._root is not None and not self._root.done():
                self._root.cancel(self.cancellation.reason or None)
                self._run_until_quiescent()
                if self.nondeterminism is None:
                    self.cancellation.start_grace()
                return
        else:
            return  # commands, audit facts and run outcomes change nothing in the code
        self._run_until_quiescent()

    def _start(self, data: dict[str, Any]) -> None:
        self.started_by = data.get("started_by")
        self.started, self.generation = data, int(data.get("generation", 1))
        try:
            value = self.decode(data.get("input"), self.workflow.input_hint)
        except PayloadError as exc:
            self._finish_failed(exc, failure=True)  # the caller's input, not the code
            return
        fn = self.workflow.fn
        coro = fn(self.context, value) if self.workflow.takes_input else fn(self.context)
        self._root = asyncio.Task(coro, loop=self._loop, name=f"workflow:{self.run_id}")
        self._loop.set_task_path(self._root, step_prefix(self.generation))
        self.run_timeout.begin(data, self.activation_time, self.workflow.run_timeout)

    def _run_until_quiescent(self) -> None:
        loop = self._loop
        while True:
            loop.run_ready()
            if self.nondeterminism is not None or self.bug is not None or self.closed:
                return
            progressed = False
            for cond in list(self._conditions):
                predicate, fut, _ = cond
                if fut.done():
                    self._conditions.remove(cond)
                    continue
                try:
                    ok = bool(predicate())
                except BaseException as exc:  # a broken predicate is a bug: suspends the run
                    self.fail_from_callback(exc)
                    ok = False
                if ok:
                    self._conditions.remove(cond)
                    fut.set_result(False)
                    progressed = True
            if self._callback_error is not None:
                self._finish_failed(self._callback_error)
                return
            if not progressed and not loop.has_ready:
                break
        root = self._root
        if root is not None and root.done() and self.outcome is None:
            self._finish(root)

    def _finish(self, root: asyncio.Task[Any]) -> None:
        exc = None if root.cancelled() else root.exception()
        if (
            exc is not None
            and not isinstance(exc, ContinueAsNew)
            and not is_failure(self.workflow, exc)
        ):
            self._finish_failed(exc)  # a bug: suspends the run, whether replaying or live
            return
        if self.replaying:
            code = getattr(self.workflow.fn, "__code__", None)
            self.nondeterministic(
                f"the workflow function returned while replaying {self._handling}, "
                "but its history goes on",
                code_did="returned",
                site=f"{code.co_filename.rsplit('/', 1)[-1]}:{code.co_firstlineno}" if code else "",
            )
            return
        if root.cancelled():
            self.outcome = self._event(self.cancellation.cancelled_data())
            self._close_open_work()
            return
        exc = root.exception()
        if isinstance(exc, ContinueAsNew):
            try:
                self.outcome = self._event(continued(exc, self))
            except PayloadError as err:
                self._finish_failed(err)
                return
            self._close_open_work()
            return
        if exc is not None:
            self._finish_failed(exc)
            return
        try:
            result = self.codec.encode(root.result())
        except PayloadError as err:
            self._finish_failed(PayloadError(f"the workflow's result: {err}"))
            return
        if self.cancel_requested:
            self.outcome = self._event(self.cancellation.cancelled_data(result=result))
        else:
            self.outcome = self._event(RunCompleted(result=result))
        self._close_open_work()

    def _finish_failed(self, exc: BaseException, *, failure: bool = False) -> None:
        """End the run `failed` if `exc` is a business failure; else it is a bug."""
        if self.outcome is not None or self.bug is not None:
            return
        if not (failure or is_failure(self.workflow, exc)):
            self.bug = workflow_bug(self.workflow, exc, self.run_id, self._handling)
            self.close()
            return
        tb = bounded("".join(traceback.format_exception(exc)), MAX_TRACEBACK)
        error = error_to_json(exc, traceback_text=tb)
        error["message"] = bounded(error["message"], MAX_MESSAGE)
        self.outcome = self._event(RunFailed(error=error))
        self._close_open_work()

    def _close_open_work(self) -> None:
        """A finished run leaves no task running: cancel what is still pending."""
        if self._root is not None and not self._root.done():
            self._root.cancel()
        self._activities.clear()
        self._timers.clear()
        self.closed = True
        self._loop.clear()

    def fail_from_callback(self, exc: BaseException) -> None:
        if isinstance(exc, NondeterminismError):
            self.nondeterminism = exc
        elif self._callback_error is None:
            self._callback_error = exc

    # == operations the context calls ========================================
    def next_step(self) -> str:
        path = self._loop.task_path()
        n = self._counters.get(path, 0) + 1
        self._counters[path] = n
        return f"{path}{n}"

    def _event(self, data: EventData) -> NewEvent:
        return data.at(self._clock())

    def check_usable(self) -> None:
        self.handlers.refuse_commands()
        if self.closed:
            raise WorkflowError("this workflow instance has finished or been evicted")

    def nondeterministic(
        self,
        message: str,
        *,
        expected: Event | None = None,
        code_did: str = "",
        site: str = "",
        step: str | None = None,
    ) -> NondeterminismError:
        """Record the first mismatch; `expected` is the history event the code did not match
        (None: the event being handled, where the history has nothing for the code's step)."""
        if expected is not None:
            where = (expected.seq, str(expected.type), str(expected.data.get("step") or "") or None)
        else:
            where = (self.current_seq, self.current_type, step)
        err = NondeterminismError(
            f"run {self.run_id!r}: {message}",
            seq=where[0],
            event_type=where[1],
            step=where[2],
            code_did=code_did,
            site=site,
        )
        if self.nondeterminism is None:
            self.nondeterminism = err
        return err

    def match(self, step: str, type_: EventType, name: str, op: str, site: str) -> Event | None:
        """The recorded command for this step, if any; raises on a mismatch."""
        ev = self._recorded.command(step)
        if ev is None:
            if self.replaying:
                raise self.nondeterministic(
                    f"the code called {op} at {site} (step {step}) while replaying "
                    f"{self._handling}, but the history has no such step",
                    code_did=op,
                    site=site,
                    step=step,
                )
            return None
        recorded_name = ev.data.get("activity") or ev.data.get("kind") or ""
        if ev.type != type_ or recorded_name != name:
            raise self.nondeterministic(
                f"history {describe(ev)} does not match the code: the code called "
                f"{op} at {site} (step {step})",
                expected=ev,
                code_did=op,
                site=site,
            )
        if ev.data.get("cause") not in (None, self.current_seq):
            raise self.nondeterministic(
                f"the code called {op} at {site} (step {step}) while handling "
                f"{self._handling}, but history {describe(ev)} was issued while "
                f"handling event {ev.data.get('cause')}",
                expected=ev,
                code_did=op,
                site=site,
            )
        self._recorded.mark(ev)
        return ev

    def _check_all_matched(self) -> None:
        ev = self._recorded.unmatched(self.processed_seq)
        if ev is not None:
            raise self.nondeterministic(
                f"history {describe(ev)} was not issued by the code on replay",
                expected=ev,
                code_did="nothing",
                site=str(ev.data.get("site") or ""),
            )

    def command(self, command: Command) -> NewEvent:
        return self._issue(self._event(command))

    def _issue(self, event: NewEvent) -> NewEvent:
        """Record a command's event, caused by the event the code is handling."""
        self.handlers.refuse_commands()
        event.data["cause"] = self.current_seq  # as `replace(command, cause=...)`, cheaper
        self._commands.append(event)
        return event

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
        self.check_usable()
        site = self.site_label or call_site()
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
        step = self.next_step()
        fut = StepFuture(self._loop, lambda: self._on_activity_cancelled(step))
        ev = self.match(step, _E.ACTIVITY_SCHEDULED, name, f"ctx.run({name})", site)
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
            now = self._clock()
            if "schedule_to_close" in data:  # counted from now, across all attempts
                data["close_by"] = now + float(data["schedule_to_close"])
            if kwargs:
                data["kwargs"] = self.codec.encode(kwargs)
            self._issue(ActivityScheduled.of_data(data, now))
        hint = found.result_hint if found is not None else Any
        self._activities[step] = Pending(fut, name, hint, site)
        return fut

    def _on_activity_cancelled(self, step: str) -> None:
        if self.closed:
            return
        p = self._activities.pop(step, None)
        if p is None:
            return
        self._cancel_command(ActivityCancelRequested(step=step, site=p.site), "activity")

    def _cancel_command(self, command: ActivityCancelRequested | TimerCancelled, what: str) -> None:
        happened = f"the code cancelled the {what} of step {command.step} ({command.site})"
        self.follow_up(command.step, command, happened)

    def follow_up(self, step: str, command: Command, happened: str) -> None:
        """Issue a command that ends or changes an earlier one (kept per step for replay)."""
        if self._recorded.follow_up(step) is not None:
            return
        if self.replaying:
            self.nondeterministic(
                f"{happened} while replaying {self._handling}, "
                "but the history does not record that",
                code_did=happened,
                site=str(getattr(command, "site", "") or ""),
                step=step,
            )
            return
        self.command(command)

    def label_sites(self, label: str) -> None:
        """Name the caller in the history's `site` fields from now on (a definition run
        names its step, where code has file:line)."""
        self.site_label = label

    def on_migrate(self, handler: Callable[[dict[str, Any]], None]) -> None:
        """Let `handler` take the run's RunMigrated events (definition runs only)."""
        self._migrate_handler = handler

    def start_timer(
        self, duration: float, site: str, *, internal: str | None = None, at: float | None = None
    ) -> tuple[str, asyncio.Future[None]]:
        """A durable timer (due at `at`, if given); `internal` marks one that backs a timeout."""
        step = self.next_step()
        fut: asyncio.Future[None] = StepFuture(self._loop, lambda: self._on_timer_cancelled(step))
        ev = self.match(
            step, _E.TIMER_STARTED, "timer", "ctx.sleep" if internal is None else internal, site
        )
        if ev is None:
            fire_at = at if at is not None else self._clock() + duration
            self.command(
                TimerStarted(step=step, kind="timer", fire_at=fire_at, duration=duration, site=site)
            )
        else:
            fire_at = TimerStarted.parse(ev).fire_at
        until = datetime.fromtimestamp(fire_at, UTC).isoformat()
        self._timers[step] = Pending(fut, until, None, site, internal)
        self._fire_at[step] = fire_at
        return step, fut

    def _on_timer_cancelled(self, step: str) -> None:
        if self.closed:
            return
        p = self._timers.pop(step, None)
        if p is not None:
            self._cancel_command(TimerCancelled(step=step, site=p.site), "timer")

    def sleep(self, duration: timedelta | float) -> asyncio.Future[None]:
        self.check_usable()
        seconds = as_seconds(duration)
        site = self.site_label or call_site()
        if seconds <= 0:
            self.next_step()
            fut: asyncio.Future[None] = self._loop.create_future()
            fut.set_result(None)
            return fut
        return self.start_timer(seconds, site)[1]

    def sleep_until(self, at: float) -> asyncio.Future[None]:
        """A durable timer due at `at` (epoch seconds); done at once if that time has passed."""
        self.check_usable()
        site = self.site_label or call_site()
        if at <= self.activation_time:
            self.next_step()
            fut: asyncio.Future[None] = self._loop.create_future()
            fut.set_result(None)
            return fut
        return self.start_timer(at - self.activation_time, site, at=at)[1]

    def wait_condition(
        self, predicate: Callable[[], bool], timeout: timedelta | float | None
    ) -> asyncio.Future[bool]:
        self.check_usable()
        site = self.site_label or call_site()
        fut: asyncio.Future[bool] = self._loop.create_future()
        if predicate():
            fut.set_result(False)
            return fut
        entry = (predicate, fut, site)
        self._conditions.append(entry)
        if timeout is not None:
            seconds = as_seconds(timeout)
            _, timer = self.start_timer(seconds, site, internal="wait_condition timeout")

            def on_timeout(_: asyncio.Future[None]) -> None:
                if not timer.cancelled() and not fut.done():
                    fut.set_result(True)

            timer.add_done_callback(on_timeout)
            fut.add_done_callback(lambda _: timer.cancel() if not timer.done() else None)
        return fut
