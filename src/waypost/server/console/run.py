"""A run's page: its status, current steps, what it waits for and what happens next in
plain words, its steps coloured by state, the timeline of its history, activity
attempts with their errors, a replay view (`?at=N`: the data after event N, with
previous and next links), and the operator commands as forms that ask for a reason.

A page reads a window of the history (`WINDOW` events, and at most a history page's bytes,
with the run's first event): the newest, the ones around the replayed event, or those
after `?after=N`, with links to older and newer ones. What it shows of steps, and what
the replay view knows, comes from that window.

A command's answer is the run page again with the outcome on top: done, or the door's
refusal (its status: 403 for a role, 409 for a state that does not allow it).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from waypost.errors import WaypostError
from waypost.model import operations as ops
from waypost.model.events import Event

from . import graph
from .commands import COMMANDS, RunState
from .history import data_after, story, timer_words
from .pages import (
    NO_NOTICE,
    Notice,
    Visit,
    add_object_page,
    engine_of,
    not_done,
    not_shown,
    page,
    posted_command,
    query_of,
    refusal,
)

router = APIRouter(include_in_schema=False)


WINDOW = 500
"""Events of a history a page shows at most (and at most a history page's bytes): a run's
page costs the same to draw whatever its history holds."""


def _number(request: Request, name: str) -> int | None:
    try:
        text = query_of(request).get(name, "")
    except WaypostError:
        return None
    if not text.isascii() or not text.isdigit() or len(text) > 9:
        return None
    return int(text)


async def _window(
    engine: Any, visit: Visit, run_id: str, after: int
) -> tuple[list[Event], int | None]:
    """The events after `after` a page shows, with the run's first (its input and what it
    runs) when they do not start there; and the event the next window starts after (None:
    these reach the end)."""
    page = await engine.execute(
        ops.PageHistory(run_id=run_id, after_seq=after, limit=WINDOW), visit.principal
    )
    events: list[Event] = list(page.events)
    if events and events[0].seq > 1:
        first = await engine.execute(
            ops.PageHistory(run_id=run_id, after_seq=0, limit=1), visit.principal
        )
        events = [*first.events, *events]
    return events, page.next_after


async def _run_page(
    request: Request,
    visit: Visit,
    run_id: str,
    notice: Notice = NO_NOTICE,
) -> Response:
    engine = engine_of(request)
    at = _number(request, "at")
    try:
        info = await engine.execute(ops.GetRun(run_id=run_id), visit.principal)
        last = info.last_seq
        start = _number(request, "after")
        if start is None:  # the newest events, or those up to the replayed one
            start = last - WINDOW if at is None else min(at, last) - WINDOW // 2
        start = max(0, min(start, last - 1))
        events, next_after = await _window(engine, visit, run_id, start)
    except WaypostError as exc:
        return not_shown(visit, exc, "Run not shown", notice)
    told = story(events)
    for w in info.waiting_for:  # a waiting timer is named by what it is for
        if w.get("kind") == "timer" and str(w.get("step")) in told.steps:
            told.steps[str(w.get("step"))].name = timer_words(w.get("purpose"), w.get("site"))
    shown = [e for e in events if e.seq > start]
    window = {
        "first": shown[0].seq if shown else 0,
        "last": shown[-1].seq if shown else 0,
        "total": last,
        "older": max(0, start - WINDOW) if start > 0 else None,
        "newer": next_after,
        "cut": start > 1,  # events between the first and the window are not shown
    }
    replay: dict[str, Any] | None = None
    if at is not None and events:
        at = max(1, min(at, events[-1].seq))
        known = data_after(events, at)
        try:
            definition = await engine.execute(ops.RunDataAt(run_id=run_id, seq=at), visit.principal)
        except WaypostError as exc:
            definition = {"error": refusal(exc)[1]}
        if definition is not None:
            known["definition"] = definition
        replay = {
            "at": at,
            "event": next((r for r in told.rows if r.seq == at), None),
            "data": known,
            "previous": at - 1 if at > 1 else None,
            "next": at + 1 if at < events[-1].seq else None,
        }
    state = RunState(
        info.status,
        open_activity=any(
            s.kind == "activity" and s.state in ("scheduled", "running", "retrying")
            for s in told.steps.values()
        ),
        definition=bool(events) and events[0].seq == 1 and "definition" in events[0].data,
    )
    commands = [c for c in COMMANDS.values() if visit.can(c.request) and c.allowed(state)]
    return page(
        "console/run.html",
        visit,
        nav="runs",
        info=info,
        story=told,
        steps=list(told.steps.values()),
        graph=await graph.for_run(engine, visit.principal, info, events),
        replay=replay,
        window=window,
        commands=commands,
        **notice.values(),
    )


add_object_page(router, "/runs/{run_id:id}", _run_page)


@router.post("/runs/{run_id:id}/commands/{name}")
async def command(request: Request, run_id: str, name: str) -> Response:
    posted = await posted_command(request, COMMANDS, name)
    if isinstance(posted, Response):
        return posted
    visit, form, chosen = posted
    fields = {f: _text(form.get(f)) for f in chosen.fields}
    reason = _text(form.get("reason"))
    try:
        request_ = chosen.build(run_id, reason, fields)
        answer = await engine_of(request).execute(request_, visit.principal)
    except WaypostError as exc:
        return await _run_page(request, visit, run_id, not_done(exc, f"{chosen.label}: not done."))
    done = f"{chosen.label}: done."
    new_run = getattr(answer, "run_id", None)
    if chosen.name == "fork" and isinstance(new_run, str):
        done += f" The new run is {new_run}."
    return await _run_page(request, visit, run_id, Notice(done))


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""
