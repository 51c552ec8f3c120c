"""The commands a run's history records, matched one by one as replayed code re-issues them.

While replaying, the code must issue exactly the recorded commands, at the same
step ids: `command(step)` finds what the history holds for a step, and what has
been matched is remembered, so that `unmatched` can name a recorded command the
code no longer issues. Follow-ups (a cancellation, an approval closed or
escalated, a correlation withdrawn) are kept per step apart from the command
they follow; `patched()` markers are kept by change id.
"""

from __future__ import annotations

from collections.abc import Sequence

from waypost.model.events import COMMAND_EVENTS, Event, EventType

_E = EventType
FOLLOW_UPS = frozenset(
    {
        _E.ACTIVITY_CANCEL_REQUESTED,
        _E.TIMER_CANCELLED,
        _E.APPROVAL_CLOSED,
        _E.APPROVAL_ESCALATED,
        _E.CORRELATION_WITHDRAWN,
    }
)


def describe(ev: Event) -> str:
    """A recorded command in words, for non-determinism messages."""
    d = ev.data
    what = d.get("activity") or d.get("kind") or ""
    site = f" from {d['site']}" if d.get("site") else ""
    return f"event {ev.seq} ({ev.type}{' ' + what if what else ''}, step {d.get('step')}{site})"


class Recorded:
    """A history's commands by step id, and which of them the code has issued again."""

    def __init__(self) -> None:
        self._commands: dict[str, Event] = {}  # step id -> command event (primary)
        self._follow_ups: dict[str, Event] = {}
        self._patches: dict[str, Event] = {}
        self._matched: set[int] = set()

    def load(self, history: Sequence[Event]) -> None:
        for ev in history:
            if ev.type not in COMMAND_EVENTS:
                continue
            step = str(ev.data.get("step"))
            if ev.type == _E.MARKER_RECORDED and ev.data.get("kind") == "patch":
                self._patches[ev.data["change_id"]] = ev
            elif ev.type in FOLLOW_UPS:
                self._follow_ups[step] = ev
            else:
                self._commands[step] = ev

    def command(self, step: str) -> Event | None:
        """The command the history records at `step` (not yet marked as matched)."""
        return self._commands.get(step)

    def follow_up(self, step: str) -> Event | None:
        """The follow-up recorded at `step`, marked as matched."""
        return self._mark(self._follow_ups.get(step))

    def patch(self, change_id: str) -> Event | None:
        """The `patched()` marker recorded for `change_id`, marked as matched."""
        return self._mark(self._patches.get(change_id))

    def mark(self, ev: Event) -> None:
        """The code issued `ev` again."""
        self._matched.add(ev.seq)

    def unmatched(self, processed_seq: int) -> Event | None:
        """A command or follow-up the code should have issued again by `processed_seq`."""
        for ev in [*self._commands.values(), *self._follow_ups.values()]:
            if ev.seq not in self._matched and (ev.data.get("cause") or 0) <= processed_seq:
                return ev
        return None

    def _mark(self, ev: Event | None) -> Event | None:
        if ev is not None:
            self._matched.add(ev.seq)
        return ev
