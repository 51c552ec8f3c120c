"""What workflow and activity code see: `WorkflowContext` and `ActivityContext`."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NoReturn, Protocol

from waypost.errors import ActivityCancelled
from waypost.model.approvals import Decision
from waypost.model.retry import Retry

from .approval_waits import ApprovalWaits
from .cancellation import CancelGrace
from .children import ChildHandle, ChildRuns
from .continuation import ContinueAsNew
from .markers import Markers
from .registry import WorkflowDefn, call_options
from .repairs import RepairHooks
from .signals import SignalWaits
from .updates import Handlers


@dataclass(frozen=True, slots=True)
class WorkflowInfo:
    """What a run's code knows about its run (`ctx.info`); the same on every replay."""

    run_id: str
    tenant: str
    workflow: str
    version: str
    generation: int  # 1, then one more for each `continue_as_new`
    started_by: str | None  # who started the run, when known (a principal, or a schedule)
    parent_run_id: str | None  # the run that started this one as its child
    forked_from: str | None  # the run this one was forked from (`runs fork`)


class ContextHost(Protocol):
    """What a `WorkflowContext` drives: the run's instance (`instance.WorkflowInstance`)
    and the parts it owns.

    Besides what workflow code may use through the context, it offers what the
    definition interpreter drives directly (`instance_of`).
    """

    run_id: str
    tenant: str
    workflow: WorkflowDefn
    replaying: bool
    signals: SignalWaits
    approvals: ApprovalWaits
    children: ChildRuns
    handlers: Handlers
    cancellation: CancelGrace
    repairs: RepairHooks
    markers: Markers
    started: dict[str, Any]  # RunStarted's data
    generation: int

    @property
    def cancel_requested(self) -> bool: ...

    def schedule_activity(
        self,
        ref: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        spec: Mapping[str, Any] | None = None,
    ) -> asyncio.Future[Any]: ...

    def sleep(self, duration: timedelta | float) -> asyncio.Future[None]: ...

    def sleep_until(self, at: float) -> asyncio.Future[None]: ...

    def wait_condition(
        self, predicate: Callable[[], bool], timeout: timedelta | float | None
    ) -> asyncio.Future[bool]: ...

    def on_migrate(self, handler: Callable[[dict[str, Any]], None]) -> None: ...

    def label_sites(self, label: str) -> None: ...


class WorkflowContext:
    """The only door from workflow code to the outside world.

    Everything here is deterministic: on replay each call returns what it
    returned the first time. `run`, `sleep`, `wait_signal` and
    `wait_condition` return awaitables whose step is fixed when they are
    called, so `asyncio.gather(ctx.run(a), ctx.run(b))` runs both in parallel
    with step ids that do not depend on which finishes first.
    """

    __slots__ = ("_instance",)

    def __init__(self, instance: ContextHost) -> None:
        self._instance = instance

    @property
    def run_id(self) -> str:
        return self._instance.run_id

    @property
    def tenant(self) -> str:
        return self._instance.tenant

    @property
    def workflow_name(self) -> str:
        return self._instance.workflow.name

    @property
    def workflow_version(self) -> str:
        return self._instance.workflow.version

    @property
    def info(self) -> WorkflowInfo:
        """The run's id, tenant, workflow, version, generation, who started it, its parent
        and the run it was forked from, as recorded when it (this generation) started."""
        inst = self._instance
        started = inst.started
        return WorkflowInfo(
            run_id=inst.run_id,
            tenant=inst.tenant,
            workflow=inst.workflow.name,
            version=inst.workflow.version,
            generation=inst.generation,
            started_by=started.get("started_by"),
            parent_run_id=(started.get("parent") or {}).get("run_id"),
            forked_from=(started.get("forked_from") or {}).get("run_id"),
        )

    @property
    def is_replaying(self) -> bool:
        """True while the code re-runs steps whose results are already recorded."""
        return self._instance.replaying

    @property
    def cancel_requested(self) -> bool:
        return self._instance.cancel_requested

    def run(self, activity: Any, *args: Any, **kwargs: Any) -> asyncio.Future[Any]:
        """Run an activity (function or registered name) and await its result.

        Raises `ActivityError` in the workflow if it fails for good.
        """
        return self._instance.schedule_activity(activity, args, kwargs)

    def options(
        self,
        *,
        timeout: timedelta | float | None = None,
        heartbeat_timeout: timedelta | float | None = None,
        retry: Retry | None = None,
        queue: str | None = None,
        schedule_to_close: timedelta | float | None = None,
    ) -> ActivityOptions:
        """Options for one call, over the activity's own (its decorator's):
        `await ctx.options(timeout=10, retry=wp.Retry(max_attempts=None)).run(poll, url)`.

        `timeout` bounds one attempt (start to close); `heartbeat_timeout` (at least 1 s);
        `retry` replaces the activity's policy for this call; `queue` is the queue its
        attempts wait in; `schedule_to_close` bounds the step's whole time, all attempts
        and retry waits together. The step records them, so a replay and every retry keep
        them.
        """
        spec = call_options(
            timeout=timeout,
            heartbeat_timeout=heartbeat_timeout,
            retry=retry,
            queue=queue,
            schedule_to_close=schedule_to_close,
        )
        return ActivityOptions(self._instance, spec)

    def sleep(self, duration: timedelta | float) -> asyncio.Future[None]:
        """A durable timer: the run holds no memory while it waits."""
        return self._instance.sleep(duration)

    def wait_signal(
        self,
        name: str,
        timeout: timedelta | float | None = None,
        *,
        type: Any = Any,
        correlate: tuple[str, str] | None = None,
    ) -> asyncio.Future[Any]:
        """The payload of the next signal `name` (one sent earlier counts).

        Raises `WaitTimeout` when `timeout` elapses first. `correlate=(key, value)`
        (two short strings, e.g. `("order", order_id)`) makes the run findable by that
        pair while it waits: a webhook source whose key is `key` delivers its signal to
        the runs waiting with `value` (`POST /v1/webhooks/{source}`). The pair is
        recorded in the history when the wait starts and withdrawn when it ends.
        """
        return self._instance.signals.wait_signal(name, timeout, type, correlate)

    def approval(
        self,
        name: str,
        *,
        approvers: Any,
        expires_in: timedelta | float | None = None,
        data: Any = None,
        escalate_to: str | None = None,
        escalate_after: timedelta | float | None = None,
    ) -> asyncio.Future[Decision]:
        """Ask people to approve; wait (holding nothing) for their `Decision`.

        `approvers` is `wp.AnyOf(...)`, `wp.Quorum(n, group=...)`, `wp.AllOf([...])`,
        a user name or a list of user names. Each approver is notified with a
        single-use credential; `engine.decide(...)` with it and the approver's
        identity counts their decision. When `expires_in` passes first, the
        decision's `outcome` is "expired". `data` (JSON) is shown to approvers.
        If nobody has decided after `escalate_after`, the members of group
        `escalate_to` may decide too, and are notified.
        """
        return self._instance.approvals.request_approval(
            name, approvers, expires_in, data, escalate_to, escalate_after
        )

    def on_signal(self, name: str, handler: Callable[[Any], Any]) -> None:
        """Call `handler(payload)` for every signal `name`, including earlier ones; an
        `async def` handler runs to its end as a task of the run."""
        self._instance.signals.on_signal(name, handler)

    def set_query(self, name: str, handler: Callable[..., Any]) -> None:
        """Answer query `name` with `handler(*args)`: a plain function that reads the
        workflow's state (`engine.query(run_id, name, *args)`). It runs on a copy of the
        run rebuilt from its history, never recorded; it may not sleep, run activities
        or record values. Set it before the code's first wait."""
        self._instance.handlers.set_query(name, handler)

    def set_update(
        self,
        name: str,
        handler: Callable[..., Any],
        validator: Callable[..., Any] | None = None,
    ) -> None:
        """Handle update `name` (`engine.update(run_id, name, *args)`): `validator(*args)`,
        a plain function, runs first against the current state, read-only, and what it
        raises rejects the update with nothing recorded; then `handler(*args)` (it may
        be `async` and await activities, timers, signals) runs in the workflow, and what
        it returns is recorded and returned to the caller. What it raises fails the
        update, not the run."""
        self._instance.handlers.set_update(name, handler, validator)

    def wait_condition(
        self, predicate: Callable[[], bool], timeout: timedelta | float | None = None
    ) -> asyncio.Future[bool]:
        """Wait until `predicate()` is true; re-evaluated after each event.

        Returns True if it timed out, False if the condition was met.
        """
        return self._instance.wait_condition(predicate, timeout)

    def now(self) -> datetime:
        """The current time (UTC), recorded so that replay sees the same value."""
        return self._instance.markers.now()

    def random(self) -> float:
        """A random float in [0, 1), recorded."""
        return self._instance.markers.random()

    def uuid(self) -> uuid.UUID:
        """A random UUID, recorded."""
        return self._instance.markers.uuid()

    async def start_child(
        self,
        workflow: Any,
        input: Any = None,
        *,
        run_id: str | None = None,
        version: str | None = None,
        close: str = "cancel",
    ) -> ChildHandle:
        """Start a child run of `workflow` (a @workflow function or a name) and go on.

        The child runs in this run's tenant, with its own history; its RunStarted names
        this run and step, and this run's history records ChildStarted and, when the
        child ends, ChildCompleted or ChildFailed. Its id is `<this run's id>-<step>`
        unless `run_id` is given, so replay never starts it twice. `await
        handle.result()` waits for its result (raising `wp.ChildFailed` if it failed, was
        cancelled or terminated). If this run ends while the child still runs, `close`
        says what becomes of it: `cancel` (asked to cancel, its cleanup runs),
        `terminate` (ended at once), or `abandon` (it goes on alone).
        """
        return self._instance.children.start_child(
            workflow, input, run_id=run_id, version=version, close=close
        )

    def child(
        self,
        workflow: Any,
        input: Any = None,
        *,
        run_id: str | None = None,
        version: str | None = None,
        close: str = "cancel",
    ) -> asyncio.Future[Any]:
        """Start a child run and wait for its result (see `start_child`).

        Raises `wp.ChildFailed` (with the child's `status` and `error`) if the child
        ended without a result; the code may catch it. Like `run`, the child's step is
        fixed when this is called, so `asyncio.gather(ctx.child(a), ctx.child(b))` runs
        both children at once.
        """
        handle = self._instance.children.start_child(
            workflow, input, run_id=run_id, version=version, close=close
        )
        return handle.result()

    def continue_as_new(self, input: Any = None) -> NoReturn:
        """End this generation of the run and go on as a new one with `input`.

        The run keeps its id; its history starts again from one event, so a workflow
        that loops for ever (a poller, a subscription) keeps a bounded history. Call it
        from the workflow function itself, in place of `return`; it never returns.
        Signals received and not yet taken in are handed to the next generation. A run
        asked to cancel ends cancelled instead.
        """
        raise ContinueAsNew(input)

    def patched(self, change_id: str) -> bool:
        """True on runs that reach this point with the new code, False on older runs.

        Wrap a code change: `if ctx.patched("fraud-check"): await ctx.run(check)`.
        Runs that passed this point before the change keep their old path.
        """
        return self._instance.markers.patched(change_id)


class ActivityOptions:
    """A call's activity options (`WorkflowContext.options`): `run` as `ctx.run`."""

    __slots__ = ("_instance", "_spec")

    def __init__(self, instance: ContextHost, spec: dict[str, Any]) -> None:
        self._instance = instance
        self._spec = spec

    def run(self, activity: Any, *args: Any, **kwargs: Any) -> asyncio.Future[Any]:
        """Run `activity(*args, **kwargs)` with these options; await its result."""
        return self._instance.schedule_activity(activity, args, kwargs, self._spec)


def instance_of(ctx: WorkflowContext) -> ContextHost:
    """The instance behind a context, for runtime code that drives it (the interpreter)."""
    return ctx._instance


@dataclass
class _ActivityState:
    heartbeat_details: Any = None
    heartbeat_at: float | None = None  # the attempt's last heartbeat
    beats: int = 0
    flushed: int = 0  # beats a lease renewal has taken
    cancelled: bool = False
    lost: bool = False


class ActivityContext:
    """What an activity knows about the attempt it runs in."""

    def __init__(
        self,
        *,
        tenant: str,
        run_id: str,
        step_id: str,
        activity: str,
        attempt: int,
        idempotency_key: str,
        deadline: float,
        clock: Callable[[], float],
        heartbeat_details: Any = None,
    ) -> None:
        self.tenant = tenant
        self.run_id = run_id
        self.step_id = step_id
        self.activity = activity
        self.attempt = attempt
        self.idempotency_key = idempotency_key
        """The same string on every attempt and redelivery of this step."""
        self.deadline = deadline
        self.last_heartbeat_details = heartbeat_details
        """What the previous attempt last passed to `heartbeat()`, if any."""
        self._clock = clock
        self._state = _ActivityState()
        self._lock = threading.Lock()

    def mark(self, *, lost: bool = False, cancelled: bool = False) -> None:
        """The engine learnt that the attempt lost its lease, or was asked to stop."""
        if lost:
            self._state.lost = True
        if cancelled:
            self._state.cancelled = True

    @property
    def cancelled(self) -> bool:
        """True once the run asked this activity to stop (or its lease was lost)."""
        return self._state.cancelled or self._state.lost

    def heartbeat(self, details: Any = None) -> None:
        """Say the activity is alive, with optional progress details.

        Keeps the attempt within its heartbeat timeout; the details are kept
        for the next attempt if this one fails. Raises `ActivityCancelled`
        once the run has asked the activity to stop.
        """
        with self._lock:
            self._state.heartbeat_details = details
            self._state.heartbeat_at = self._clock()
            self._state.beats += 1
        if self.cancelled:
            raise ActivityCancelled(
                f"activity {self.activity!r} (step {self.step_id}) of run {self.run_id!r} "
                "was asked to stop"
            )

    def take_heartbeat(self) -> tuple[float | None, Any]:
        """A heartbeat not taken yet: its time and details (for the engine's lease renewals)."""
        with self._lock:
            state = self._state
            if state.beats == state.flushed:
                return None, None
            state.flushed = state.beats
            return state.heartbeat_at, state.heartbeat_details

    def final_heartbeat(self) -> tuple[float | None, Any]:
        """The attempt's last heartbeat, taken by a renewal or not (for its outcome).

        A renewal that took it may have found the task no longer leased (the attempt
        had just ended): the outcome carries the details to the next attempt anyway.
        """
        with self._lock:
            return self._state.heartbeat_at, self._state.heartbeat_details
