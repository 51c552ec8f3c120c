"""What the `waypost` commands print for a person: tables, a run in words, worker log lines.

Tables and colours come from `rich`. Colour is used only on a terminal and
never when NO_COLOR is set; piped output is plain text, one row a line, with no
box drawing, so `grep` and `awk` read it. Every value that came from outside
(ids, names, error messages, payloads) is shown through `identity.printable`
and as `rich.text.Text`, never as markup: a `[bold]` or a control character in
a run id is shown, not obeyed.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

import click
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from waypost.model.events import Event, EventType
from waypost.model.identity import printable
from waypost.model.records import RunInfo

STATUS_STYLES = {
    "running": "cyan",
    "waiting": "blue",
    "paused": "yellow",
    "suspended": "magenta",
    "completed": "green",
    "failed": "red",
    "cancelled": "yellow",
    "terminated": "red",
}
TIMELINE_EVENTS = 50
"""How many of a run's last events `runs show` lists (`runs history` prints all)."""

_DETAIL = 80


def _terminal() -> bool:
    return sys.stdout.isatty()


def console() -> Console:
    """A console writing to stdout: coloured on a terminal unless NO_COLOR is set."""
    tty = _terminal()
    return Console(
        file=sys.stdout,
        force_terminal=tty,
        no_color=bool(os.environ.get("NO_COLOR")) or not tty,
        color_system="auto" if tty and not os.environ.get("NO_COLOR") else None,
        width=None if tty else 10_000,
        highlight=False,
        emoji=False,
        markup=False,
    )


def show(*renderables: Any) -> None:
    """Print renderables to stdout, without trailing blanks on any line."""
    out = console()
    with out.capture() as captured:
        for r in renderables:
            out.print(r)
    text = "\n".join(line.rstrip() for line in captured.get().splitlines())
    click.echo(text)


def cell(value: Any, limit: int = 200) -> Text:
    """An outside value as one printable cell."""
    return Text("" if value is None else printable(value, limit))


def table(*headers: str) -> Table:
    """A table with a header: boxed lightly on a terminal, plain columns when piped."""
    tty = _terminal()
    return Table(
        *headers,
        box=box.SIMPLE_HEAD if tty else None,
        header_style="bold" if tty else "",
        show_edge=False,
        pad_edge=False,
        padding=(0, 1) if tty else (0, 2, 0, 0),
    )


def facts_grid() -> Table:
    """Two columns, a name and its value, with no header: a record in words."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold" if _terminal() else "")
    grid.add_column()
    return grid


def status_text(status: str) -> Text:
    return Text(status, style=STATUS_STYLES.get(status, ""))


def _time(value: datetime | None) -> str:
    if value is None:
        return "-"
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def waits_on(waiting: Sequence[dict[str, Any]], limit: int = 2) -> str:
    """What a run waits on, in a few words: `signal 'approve', timer +1`."""
    words = []
    for w in waiting:
        kind = str(w.get("kind"))
        name = w.get("activity") or w.get("name") or w.get("purpose")
        if kind == "code":  # what no running worker serves
            kind = "no worker for" if name else "no worker"
        words.append(f"{kind} {printable(name, 40)!s}" if name else kind)
    if not words:
        return "-"
    shown = ", ".join(words[:limit])
    return shown if len(words) <= limit else f"{shown} +{len(words) - limit}"


# == runs list ===========================================================================
def runs_table(infos: Iterable[RunInfo]) -> Table:
    t = table("TENANT", "RUN ID", "WORKFLOW", "STATUS", "CREATED", "WAITS ON")
    for i in infos:
        t.add_row(
            cell(i.tenant),
            cell(i.run_id),
            cell(f"{i.workflow}@{i.version}"),
            status_text(i.status.value),
            _time(i.created_at),
            cell("-" if i.finished else waits_on(i.waiting_for)),
        )
    return t


# == runs show ===========================================================================
def _error_words(error: Any) -> str:
    if not isinstance(error, dict):
        return " ".join(str(error).split())
    kind, message = error.get("type"), error.get("message")
    text = f"{kind}: {message}" if kind and message else str(kind or message or error)
    if error.get("site"):  # where in the workflow's code (a bug's file and line)
        text += f" (at {error['site']})"
    return " ".join(text.split())


def _when(value: Any) -> str:
    if isinstance(value, int | float):
        return _time(datetime.fromtimestamp(value, UTC)) + " UTC"
    if isinstance(value, str):
        try:
            return _time(datetime.fromisoformat(value)) + " UTC"
        except ValueError:
            return printable(value, 60)
    return "-"


def current_step(events: Sequence[Event]) -> dict[str, Any] | None:
    """The last activity step the history shows: its name, attempt, last error, next retry."""
    steps: dict[str, dict[str, Any]] = {}
    last: str | None = None
    for ev in events:
        step = ev.data.get("step") if isinstance(ev.data, dict) else None
        if not isinstance(step, str):
            continue
        if ev.type == EventType.ACTIVITY_SCHEDULED:
            steps[step] = {"step": step, "activity": ev.data.get("activity"), "attempt": 1}
            last = step
        elif step in steps and ev.type == EventType.ACTIVITY_FAILED:
            s = steps[step]
            s["error"] = ev.data.get("error")
            s["error_attempt"] = ev.data.get("attempt")
            if ev.data.get("retrying"):
                s["attempt"] = int(ev.data.get("attempt") or 0) + 1
                s["retry_at"] = ev.data.get("retry_at")
            else:
                s["state"] = "failed"
                s.pop("retry_at", None)
        elif step in steps and ev.type == EventType.ACTIVITY_COMPLETED:
            steps[step]["state"] = "completed"
            steps[step].pop("retry_at", None)
    return steps.get(last) if last is not None else None


def run_words(info: RunInfo, events: Sequence[Event]) -> list[Any]:
    """`runs show`: the run's state in words, then a timeline of its history."""
    facts = facts_grid()
    facts.add_row("run", cell(info.run_id))
    facts.add_row("tenant", cell(info.tenant))
    facts.add_row("workflow", cell(f"{info.workflow}@{info.version}"))
    facts.add_row("status", status_text(info.status.value))
    facts.add_row("created", _time(info.created_at) + " UTC")
    facts.add_row("updated", _time(info.updated_at) + " UTC")
    if info.finished_at is not None:
        facts.add_row("finished", _time(info.finished_at) + " UTC")
    if not info.finished:
        facts.add_row("waits on", cell(waits_on(info.waiting_for, limit=5)))
    action = info.next_action
    if action:
        nxt = str(action.get("detail") or action.get("kind"))
        facts.add_row("next", cell(nxt, 400))
    step = current_step(events)
    if step is not None and (not info.finished or step.get("error") is not None):
        state = step.get("state", "in progress")
        facts.add_row(
            "step",
            cell(f"{step['step']} ({step.get('activity')}), attempt {step['attempt']}, {state}"),
        )
        if step.get("error") is not None:
            facts.add_row(
                "last error",
                cell(f"{_error_words(step['error'])} (attempt {step.get('error_attempt')})", 400),
            )
        if step.get("retry_at") is not None and not info.finished:
            facts.add_row("next retry", _when(step["retry_at"]))
    if info.error is not None:
        facts.add_row("error", cell(_error_words(info.error), 400))
    if info.status.value == "completed":
        facts.add_row("result", cell(json.dumps(info.result, default=str, sort_keys=True), 400))
    if info.parent is not None:
        facts.add_row("parent", cell(f"{info.parent['run_id']} (step {info.parent['step']})"))
    for child in info.children or ():
        facts.add_row(
            "child",
            cell(
                f"{child['run_id']} ({child['workflow']}, step {child['step']}, {child['status']})"
            ),
        )
    return [facts, "", timeline(events)]


def _event_detail(ev: Event) -> str:
    d = ev.data if isinstance(ev.data, dict) else {}
    if ev.undecodable:
        return "undecodable (see `waypost runs verify`)"
    if "error" in d and d["error"] is not None:
        text = _error_words(d["error"])
        if d.get("retrying"):
            text += f"; retry at {_when(d.get('retry_at'))}"
        return text
    if isinstance(d.get("forked_from"), dict):  # a fork's RunStarted
        link = d["forked_from"]
        return f"forked from {link.get('run_id')} at event {link.get('seq')}"
    if d.get("to_run_id") is not None:  # RunForked
        return f"forked as {d['to_run_id']}: {d.get('reason', '')}"
    for key in ("activity", "name", "signal", "reason", "decision", "purpose", "fire_at"):
        if d.get(key) not in (None, ""):
            value = d[key]
            return f"{key} {_when(value) if key == 'fire_at' else value}"
    if "result" in d:
        return "result " + json.dumps(d["result"], default=str, sort_keys=True)
    return ""


def timeline(events: Sequence[Event], limit: int = TIMELINE_EVENTS) -> Table:
    t = table("TIME", "SEQ", "EVENT", "STEP", "ATTEMPT", "DETAIL")
    t.title = None
    shown = events[-limit:] if limit > 0 else events
    for ev in shown:
        d = ev.data if isinstance(ev.data, dict) else {}
        t.add_row(
            _time(ev.time),
            str(ev.seq),
            cell(ev.type),
            cell(d.get("step", "")),
            cell(d.get("attempt", "")),
            cell(_event_detail(ev), _DETAIL),
        )
    if len(events) > len(shown):
        t.caption = (
            f"the last {len(shown)} of {len(events)} events; `waypost runs history` prints all"
        )
    return t
