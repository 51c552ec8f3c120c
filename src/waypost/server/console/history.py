"""A run's history as the run page shows it: a timeline (time, actor, attempt,
duration), the steps so far with their states, the activity attempts with their
errors, and the data known after each event (the replay view).

Pure functions of the events the door answers: nothing here reads the database.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from waypost.model.events import Event, EventType

ACTORS = ("by", "approver", "principal", "started_by", "requested_by")


@dataclass
class Step:
    """A step of the run so far and its state (scheduled, running, retrying, completed,
    failed, skipped, waiting)."""

    step: str
    kind: str
    name: str
    state: str
    attempt: int = 0
    error: dict[str, Any] | None = None


@dataclass(frozen=True)
class Row:
    seq: int
    time: float
    type: str
    step: str
    attempt: Any
    actor: str
    duration: float | None
    detail: str


@dataclass(frozen=True)
class Attempt:
    step: str
    activity: str
    attempt: Any
    outcome: str
    at: float
    duration: float | None
    error: dict[str, Any] | None


@dataclass
class Story:
    rows: list[Row] = field(default_factory=list)
    steps: dict[str, Step] = field(default_factory=dict)
    attempts: list[Attempt] = field(default_factory=list)


def error_words(error: Any) -> str:
    if not isinstance(error, dict):
        return " ".join(str(error).split())
    kind, message = error.get("type"), error.get("message")
    text = f"{kind}: {message}" if kind and message else str(kind or message or error)
    return " ".join(text.split())[:2000]


def error_site(error: Any) -> str:
    """Where in the workflow's code an error was raised (its file and line), if known."""
    if not isinstance(error, dict):
        return ""
    site = error.get("site") or error.get("location") or ""
    return str(site)[:500]


def when_words(iso: Any) -> str:
    """An ISO time as people read it: "2026-12-04 22:39 UTC" (the text itself if it is
    not a time)."""
    try:
        at = datetime.fromisoformat(str(iso))
    except ValueError:
        return str(iso)
    if at.tzinfo is not None:
        at = at.astimezone(UTC)
    return at.strftime("%Y-%m-%d %H:%M UTC")


def timer_words(purpose: Any, site: Any) -> str:
    """What a timer is for, in words: the run's time limit, an approval's expiry, the
    timeout of a wait, or a plain timer (a sleep)."""
    text = str(purpose or "")
    if found := re.fullmatch(r"approval\((.*)\) expiry", text):
        return f"expiry of approval {found[1]}"
    if found := re.fullmatch(r"wait_signal\((.*)\) timeout", text):
        return f"timeout of the wait for signal {found[1]}"
    if text == "wait_condition timeout":
        return "timeout of a condition's wait"
    if text:
        return text
    if str(site or "").endswith(" timeout"):
        return "the run's time limit"
    return "timer"


def waiting_words(waiting: list[dict[str, Any]]) -> list[str]:
    """What a run waits for, one plain phrase per wait: "signal go", "activity charge
    (step 3)", "the run's time limit at 2026-12-31 10:00 UTC (step 1)", "approval
    manager (step 2.2)"."""
    words = []
    for w in waiting:
        kind = str(w.get("kind", "something"))
        name = w.get("activity") or w.get("name") or w.get("purpose") or ""
        text = f"{kind} {name}".strip()
        if kind == "code":
            text = f"a worker that serves {name}" if name else "a worker for its code"
        if kind == "timer":
            text = timer_words(w.get("purpose"), w.get("site"))
            if w.get("until"):
                text += f" at {when_words(w['until'])}"
        if w.get("step") not in (None, "") and kind in ("activity", "timer", "approval"):
            text += f" (step {w['step']})"
        if w.get("detail"):
            text += f": {w['detail']}"
        words.append(" ".join(str(text).split())[:300])
    return words


def next_words(action: dict[str, Any] | None) -> str:
    """`next_action` in plain words: its detail, and when (unless the detail says)."""
    if not action:
        return ""
    text = str(action.get("detail") or action.get("kind") or "")
    if action.get("at") and " UTC" not in text:
        text += f" (at {when_words(action['at'])})"
    return text


def _actor(data: dict[str, Any], kind: str) -> str:
    for name in ACTORS:
        value = data.get(name)
        if isinstance(value, str) and value:
            return value
    return "engine" if kind != EventType.SIGNAL_RECEIVED else "sender"


def _detail(ev: Event) -> str:
    d = ev.data
    if ev.undecodable:
        return "undecodable (see waypost runs verify)"
    if d.get("error") is not None:
        text = error_words(d["error"])
        return text + ("; will retry" if d.get("retrying") else "")
    for name in ("reason", "signal", "name", "activity", "decision", "purpose"):
        value = d.get(name)
        if isinstance(value, str) and value:
            return f"{name}: {value}"[:300]
    return ""


def story(events: list[Event]) -> Story:
    """The timeline, steps and attempts of a history."""
    told = Story()
    started: dict[str, float] = {}  # step -> when its current attempt began
    for ev in events:
        d = ev.data if isinstance(ev.data, dict) else {}
        raw = d.get("step")
        step = raw if isinstance(raw, str) else ""
        duration = None
        if ev.type == EventType.ACTIVITY_SCHEDULED and step:
            told.steps[step] = Step(step, "activity", str(d.get("activity", "")), "scheduled", 1)
            started[step] = ev.ts
        elif ev.type in (EventType.ACTIVITY_COMPLETED, EventType.ACTIVITY_FAILED) and step:
            if step in started:
                duration = max(0.0, ev.ts - started[step])
                started[step] = ev.ts
            s = told.steps.get(step)
            failed = ev.type == EventType.ACTIVITY_FAILED
            if s is not None:
                s.attempt = int(d.get("attempt") or s.attempt or 1)
                s.error = d.get("error") if failed else s.error
                s.state = (
                    "completed" if not failed else "retrying" if d.get("retrying") else "failed"
                )
            told.attempts.append(
                Attempt(
                    step=step,
                    activity=s.name if s is not None else "",
                    attempt=d.get("attempt"),
                    outcome="failed" if failed else "completed",
                    at=ev.ts,
                    duration=duration,
                    error=d.get("error") if failed else None,
                )
            )
        elif ev.type == EventType.TIMER_STARTED and step:
            told.steps[step] = Step(step, "timer", str(d.get("purpose", "timer")), "waiting")
        elif ev.type == EventType.TIMER_FIRED and step in told.steps:
            told.steps[step].state = "completed"
        elif ev.type == EventType.APPROVAL_REQUESTED and step:
            told.steps[step] = Step(step, "approval", str(d.get("name", step)), "waiting")
        elif ev.type == EventType.APPROVAL_CLOSED and step in told.steps:
            told.steps[step].state = "completed"
        elif ev.type == EventType.STEP_SKIPPED and step in told.steps:
            told.steps[step].state = "skipped"
        told.rows.append(
            Row(
                seq=ev.seq,
                time=ev.ts,
                type=ev.type,
                step=step,
                attempt=d.get("attempt", ""),
                actor=_actor(d, ev.type),
                duration=duration,
                detail=_detail(ev),
            )
        )
    return told


def data_after(events: list[Event], at: int) -> dict[str, Any]:
    """What the run's data was after event `at`: its input, the results known so far by
    step, the signals received, and a definition run's data where events carry it."""
    known: dict[str, Any] = {"input": None, "results": {}, "signals": [], "status": "running"}
    for ev in events:
        if ev.seq > at:
            break
        d = ev.data if isinstance(ev.data, dict) else {}
        if ev.type == EventType.RUN_STARTED:
            known["input"] = d.get("input")
        elif ev.type == EventType.ACTIVITY_COMPLETED:
            known["results"][str(d.get("step"))] = d.get("result")
        elif ev.type == EventType.SIGNAL_RECEIVED:
            name = d.get("name", d.get("signal"))
            known["signals"].append({"signal": name, "payload": d.get("payload")})
        elif ev.type == EventType.INPUT_UPDATED and "data" in d:
            known["data"] = d.get("data")
        elif ev.type == EventType.RUN_COMPLETED:
            known["status"], known["result"] = "completed", d.get("result")
        elif ev.type in (EventType.RUN_FAILED, EventType.RUN_SUSPENDED):
            known["status"] = "failed" if ev.type == EventType.RUN_FAILED else "suspended"
            known["error"] = d.get("error")
        if isinstance(d.get("context"), dict):  # a definition run's data, where recorded
            known["data"] = d["context"]
    return known
