"""The approval side of a workflow instance: asking people to decide, expiry and
escalation timers, and closing approvals the code no longer waits for.

`ApprovalWaits` is mixed into `instance.WorkflowInstance`, as `signals.SignalWaits`
is: an approval is a command (`ApprovalRequested`, its own step) whose decision comes
back as an event, with an optional expiry timer and escalation timer of its own.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from waypost.errors import ConfigurationError
from waypost.model import approvals as ap
from waypost.model.codec import Codec
from waypost.model.events import (
    ApprovalClosed,
    ApprovalEscalated,
    ApprovalRequested,
    Command,
    Event,
    EventType,
    NewEvent,
)

from .loop import Pending, StepFuture, WorkflowLoop, as_seconds, call_site

_E = EventType


class ApprovalWaits:
    """The approval side of a workflow instance (mixed into `WorkflowInstance`)."""

    # Kept by the instance.
    closed: bool
    site_label: str | None
    codec: Codec
    tenant: str
    run_id: str
    started_by: str | None
    _loop: WorkflowLoop
    _approvals: dict[str, Pending]
    _fire_at: dict[str, float]

    # What the instance does for every kind of step.
    def next_step(self) -> str:
        raise NotImplementedError

    def start_timer(
        self, duration: float, site: str, *, internal: str | None = None, at: float | None = None
    ) -> tuple[str, asyncio.Future[None]]:
        raise NotImplementedError

    def _check_usable(self) -> None:
        raise NotImplementedError

    def _match(self, step: str, type_: EventType, name: str, op: str, site: str) -> Event | None:
        raise NotImplementedError

    def _command(self, command: Command) -> NewEvent:
        raise NotImplementedError

    def _follow_up(self, step: str, command: Command, happened: str) -> None:
        raise NotImplementedError

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
        site = self.site_label or call_site()
        policy = ap.as_policy(approvers)
        if (escalate_to is None) != (escalate_after is None):
            raise ConfigurationError("escalate_to and escalate_after go together")
        step = self.next_step()
        kind = f"approval:{name}"
        fut: asyncio.Future[ap.Decision] = StepFuture(
            self._loop, lambda: self._on_approval_cancelled(step)
        )
        ev = self._match(step, _E.APPROVAL_REQUESTED, kind, f"ctx.approval({name!r})", site)
        command: dict[str, Any] | None = None
        if ev is not None:
            # Replay: the id is the one recorded (random since ids are unguessable; a
            # history recorded before then derived it from tenant, run and step).
            recorded = ev.data.get("approval_id")
            approval_id = (
                recorded
                if isinstance(recorded, str) and recorded
                else ap.approval_id_for(self.tenant, self.run_id, step)
            )
        else:
            approval_id = ap.new_approval_id()
            requested = ApprovalRequested(
                step=step,
                kind=kind,
                name=name,
                approval_id=approval_id,
                policy=policy.to_json(),
                started_by=self.started_by,
                data=self.codec.encode(data),
                expires_at=None,
                timer_step=None,
                site=site,
            )
            # Its expiry's timer is known only once started (below), after it.
            command = self._command(requested).data
        self._approvals[step] = Pending(fut, name, None, site, approval_id)
        if expires_in is not None:
            seconds = as_seconds(expires_in)
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
            self._escalation(step, approval_id, escalate_to, as_seconds(escalate_after), fut, site)
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
            escalated = ApprovalEscalated(
                step=timer_step, approval_step=step, approval_id=approval_id, group=group, site=site
            )
            self._follow_up(
                timer_step,
                escalated,
                f"the approval of step {step} ({site}) escalated to {group}",
            )

        timer.add_done_callback(on_due)
        fut.add_done_callback(lambda _: timer.cancel() if not timer.done() else None)

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
            ApprovalClosed(step=step, approval_id=approval_id, status=status, site=site),
            f"the code closed the approval of step {step} ({site}, {status})",
        )
