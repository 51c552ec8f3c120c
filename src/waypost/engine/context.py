"""What workflow and activity code see: `WorkflowContext` and `ActivityContext`."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from waypost.errors import ActivityCancelled
from waypost.model.approvals import Decision

if TYPE_CHECKING:
    from .runtime import WorkflowInstance


class WorkflowContext:
    """The only door from workflow code to the outside world.

    Everything here is deterministic: on replay each call returns what it
    returned the first time. `run`, `sleep`, `wait_signal` and
    `wait_condition` return awaitables whose step is fixed when they are
    called, so `asyncio.gather(ctx.run(a), ctx.run(b))` runs both in parallel
    with step ids that do not depend on which finishes first.
    """

    __slots__ = ("_instance",)

    def __init__(self, instance: WorkflowInstance) -> None:
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

    def sleep(self, duration: timedelta | float) -> asyncio.Future[None]:
        """A durable timer: the run holds no memory while it waits."""
        return self._instance.sleep(duration)

    def wait_signal(
        self, name: str, timeout: timedelta | float | None = None, *, type: Any = Any
    ) -> asyncio.Future[Any]:
        """The payload of the next signal `name` (one sent earlier counts).

        Raises `WaitTimeout` when `timeout` elapses first.
        """
        return self._instance.wait_signal(name, timeout, type)

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
        return self._instance.request_approval(
            name, approvers, expires_in, data, escalate_to, escalate_after
        )

    def on_signal(self, name: str, handler: Callable[[Any], Any]) -> None:
        """Call `handler(payload)` for every signal `name`, including earlier ones."""
        self._instance.on_signal(name, handler)

    def wait_condition(
        self, predicate: Callable[[], bool], timeout: timedelta | float | None = None
    ) -> asyncio.Future[bool]:
        """Wait until `predicate()` is true; re-evaluated after each event.

        Returns True if it timed out, False if the condition was met.
        """
        return self._instance.wait_condition(predicate, timeout)

    def now(self) -> datetime:
        """The current time (UTC), recorded so that replay sees the same value."""
        return self._instance.now()

    def random(self) -> float:
        """A random float in [0, 1), recorded."""
        return self._instance.random()

    def uuid(self) -> uuid.UUID:
        """A random UUID, recorded."""
        return self._instance.uuid()

    def patched(self, change_id: str) -> bool:
        """True on runs that reach this point with the new code, False on older runs.

        Wrap a code change: `if ctx.patched("fraud-check"): await ctx.run(check)`.
        Runs that passed this point before the change keep their old path.
        """
        return self._instance.patched(change_id)


@dataclass
class _ActivityState:
    heartbeat_details: Any = None
    heartbeat_at: float | None = None
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
        if self.cancelled:
            raise ActivityCancelled(
                f"activity {self.activity!r} (step {self.step_id}) of run {self.run_id!r} "
                "was asked to stop"
            )

    def _take_heartbeat(self) -> tuple[float | None, Any]:
        with self._lock:
            at, details = self._state.heartbeat_at, self._state.heartbeat_details
            self._state.heartbeat_at = None
            return at, details
