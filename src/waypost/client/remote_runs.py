"""How the requests of the remote client's run calls whose routes are written by hand
cross the wire: a run, a page of its history, fork, verify, and retention's purge and
purged runs (the other run commands' routes are derived); a run and an event rebuilt
from their JSON forms.

The calls themselves are the embedded engine's, made remote (`twins.remote_twin`, listed
in `AsyncClient`), so code moves between `wp.Engine` and `wp.Client` unchanged. A
refusal comes back as the same error class (see `remote.error_from`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from waypost.model import operations as ops
from waypost.model.events import ChainProblem, Event
from waypost.model.fork import Forked
from waypost.model.records import HistoryPage, PurgedRun, PurgeReport, RunInfo
from waypost.model.status import RunStatus

from .door import Sends
from .remote_wire import Wires, body, record, route


async def _fork(send: Sends, asked: ops.Fork) -> Forked:
    names = {"at_step": "step", "up_to_seq": "seq", "new_run_id": "run_id"}
    data = await send(*route(asked), json=body(asked, **names))
    return Forked(
        run_id=str(data["run_id"]),
        forked_from=dict(data.get("forked_from") or {}),
        created=bool(data.get("created", True)),
    )


async def _verify(send: Sends, asked: ops.Verify) -> list[ChainProblem]:
    data = await send(*route(asked))
    return [ChainProblem(int(p["seq"]), str(p["problem"])) for p in data["problems"]]


async def _purge_runs(send: Sends, asked: ops.PurgeRuns) -> PurgeReport:
    sent: dict[str, Any] = {
        "older_than": asked.older_than_seconds,
        "dry_run": asked.dry_run,
        "limit": asked.limit,
        "reason": asked.reason,
    }
    return record(PurgeReport, await send(*route(asked), json=sent))


async def _purged_run(send: Sends, asked: ops.GetPurged) -> PurgedRun:
    return record(PurgedRun, await send(*route(asked)))


async def _purged_runs(send: Sends, asked: ops.ListPurged) -> list[PurgedRun]:
    data = await send(*route(asked), params={"limit": asked.limit})
    return [record(PurgedRun, item) for item in data["purged_runs"]]


async def _get(send: Sends, asked: ops.GetRun) -> RunInfo:
    return run_info(await send(*route(asked)))


async def _history_page(send: Sends, asked: ops.PageHistory) -> HistoryPage:
    params = {"after_seq": str(asked.after_seq), "limit": str(asked.limit)}
    answer = await send(*route(asked), params=params)
    after = answer.get("next_after")
    return HistoryPage(
        [event(item) for item in answer["events"]], after if isinstance(after, int) else None
    )


def run_info(data: dict[str, Any]) -> RunInfo:
    """A `RunInfo` from its JSON form."""

    def when(text: Any) -> datetime | None:
        return datetime.fromisoformat(text) if isinstance(text, str) else None

    created = datetime.fromisoformat(data["created_at"])
    updated = datetime.fromisoformat(data["updated_at"])
    return RunInfo(
        tenant=data["tenant"],
        run_id=data["run_id"],
        workflow=data["workflow"],
        version=data["version"],
        status=RunStatus(data["status"]),
        input=data.get("input"),
        result=data.get("result"),
        error=data.get("error"),
        waiting_for=list(data.get("waiting_for") or []),
        last_seq=int(data.get("last_seq", 0)),
        created_at=created,
        updated_at=updated,
        finished_at=when(data.get("finished_at")),
        next_action=data.get("next_action"),
        priority=int(data.get("priority") or 0),
        parent=data.get("parent"),
        children=data.get("children"),
    )


def event(data: dict[str, Any]) -> Event:
    """An `Event` from its JSON form."""
    ts = datetime.fromisoformat(data["time"]).timestamp()
    return Event(
        int(data["seq"]),
        str(data["type"]),
        dict(data.get("data") or {}),
        ts,
        str(data.get("hash", "")),
        undecodable=bool(data.get("undecodable", False)),
    )


RUN_WIRES: Wires = {
    ops.GetRun: _get,
    ops.PageHistory: _history_page,
    ops.Fork: _fork,
    ops.Verify: _verify,
    ops.PurgeRuns: _purge_runs,
    ops.GetPurged: _purged_run,
    ops.ListPurged: _purged_runs,
}
