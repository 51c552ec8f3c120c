"""Approvals as workflow code sees them: asking people to decide, expiry and
escalation timers, and closing approvals the code no longer waits for.

The approval seam of a run: `ApprovalWaits`, a part the instance owns (as it owns
`signals.SignalWaits`). An approval is a command (`ApprovalRequested`, its own step)
whose decision comes back as an event, with an optional expiry timer and escalation
timer of its own.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from waypost.errors import ConfigurationError
from waypost.model import approvals as ap
from waypost.model.events import ApprovalClosed, ApprovalEscalated, ApprovalRequested, EventType

from .loop import Pending, StepFuture, as_seconds, call_site
from .port import InstancePort

_E = EventType


class ApprovalWaits:
    """The approvals one run asked for and still waits on."""

    def __init__(self, port: InstancePort) -> None:
        self._port = port
        self._approvals: dict[str, Pending] = {}

    @property
    def asking(self) -> bool:
        """Whether an approval is still open (a run that ends now must close it)."""
        return bool(self._approvals)

    def waits(self) -> list[dict[str, Any]]:
        """What the run waits for in approvals, for its snapshot."""
        return [
            {"kind": "approval", "step": step, "name": p.name, "approval_id": p.extra}
            for step, p in self._approvals.items()
        ]

    def request_approval(
        self,
        name: str,
        approvers: Any,
        expires_in: timedelta | float | None,
        data: Any,
        escalate_to: str | None = None,
        escalate_after: timedelta | float | None = None,
    ) -> asyncio.Future[ap.Decision]:
        self._port.check_usable()
        site = self._port.site_label or call_site()
        policy = ap.as_policy(approvers)
        if (escalate_to is None) != (escalate_after is None):
            raise ConfigurationError("escalate_to and escalate_after go together")
        step = self._port.next_step()
        kind = f"approval:{name}"
        fut: asyncio.Future[ap.Decision] = StepFuture(
            self._port.loop, lambda: self._on_approval_cancelled(step)
        )
        ev = self._port.match(step, _E.APPROVAL_REQUESTED, kind, f"ctx.approval({name!r})", site)
        command: dict[str, Any] | None = None
        if ev is not None:
            # Replay: the id is the one recorded (random since ids are unguessable; a
            # history recorded before then derived it from tenant, run and step).
            recorded = ApprovalRequested.parse(ev).approval_id
            approval_id = (
                recorded
                if isinstance(recorded, str) and recorded
                else ap.approval_id_for(self._port.tenant, self._port.run_id, step)
            )
        else:
            approval_id = ap.new_approval_id()
            requested = ApprovalRequested(
                step=step,
                kind=kind,
                name=name,
                approval_id=approval_id,
                policy=policy.to_json(),
                started_by=self._port.started_by,
                data=self._port.codec.encode(data),
                expires_at=None,
                timer_step=None,
                site=site,
            )
            # Its expiry's timer is known only once started (below), after it.
            command = self._port.command(requested).data
        self._approvals[step] = Pending(fut, name, None, site, approval_id)
        if expires_in is not None:
            seconds = as_seconds(expires_in)
            timer_step, timer = self._port.start_timer(
                seconds, site, internal=f"approval({name}) expiry"
            )
            if command is not None:
                command["timer_step"] = timer_step
                command["expires_at"] = self._port.timer_due(timer_step)

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
        timer_step, timer = self._port.start_timer(seconds, site, internal=f"escalation to {group}")

        def on_due(_: asyncio.Future[None]) -> None:
            if timer.cancelled() or fut.done():
                return
            escalated = ApprovalEscalated(
                step=timer_step, approval_step=step, approval_id=approval_id, group=group, site=site
            )
            self._port.follow_up(
                timer_step,
                escalated,
                f"the approval of step {step} ({site}) escalated to {group}",
            )

        timer.add_done_callback(on_due)
        fut.add_done_callback(lambda _: timer.cancel() if not timer.done() else None)

    def decided(self, d: dict[str, Any]) -> bool:
        """ApprovalDecided reached the run: resolve the code's wait with the decision.
        False for one vote of several, which changes nothing in the code."""
        if d.get("outcome") not in (ap.APPROVED, ap.REJECTED):
            return False  # one vote of several: the code waits on
        p = self._approvals.pop(d["step"], None)
        if p is not None and not p.future.done():
            votes = tuple(
                ap.Vote(v["principal"], v["decision"], v.get("comment", ""), v.get("at", 0.0))
                for v in d.get("votes", ())
            )
            p.future.set_result(ap.Decision(d["outcome"], d["approval_id"], votes))
        return True

    def withdraw_approvals(self, status: str) -> None:
        """Close every open approval with `status` (their credentials die)."""
        for step, p in list(self._approvals.items()):
            del self._approvals[step]
            self._close_approval(step, str(p.extra), status, p.site)

    def _on_approval_cancelled(self, step: str) -> None:
        if self._port.closed:
            return
        p = self._approvals.pop(step, None)
        if p is not None:
            self._close_approval(step, str(p.extra), ap.CANCELLED, p.site)

    def _close_approval(self, step: str, approval_id: str, status: str, site: str) -> None:
        self._port.follow_up(
            step,
            ApprovalClosed(step=step, approval_id=approval_id, status=status, site=site),
            f"the code closed the approval of step {step} ({site}, {status})",
        )
