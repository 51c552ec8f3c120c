"""Records the pure code reads: sealed histories, run snapshots, tasks, and what a run
waits for, with defaults a test overrides by name."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

from waypost.model.chain import seal
from waypost.model.events import Event, EventType, NewEvent
from waypost.store.base import RunRecord, TaskState

NOW = 1_800_000_000.0


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat()


def run(status: str = "waiting", **changes: Any) -> RunRecord:
    fields: dict[str, Any] = {
        "tenant": "acme",
        "run_id": "r1",
        "workflow": "order",
        "version": "1",
        "status": status,
        "input": {},
        "input_json": "{}",
        "result": None,
        "error": None,
        "waiting_for": [],
        "last_seq": 3,
        "last_hash": "h",
        "processed_seq": 3,
        "created_at": NOW - 60,
        "updated_at": NOW - 30,
        "finished_at": None,
    }
    fields.update(changes)
    return RunRecord(**fields)


def task(kind: str = "activity", step: str = "1", **changes: Any) -> TaskState:
    fields: dict[str, Any] = {
        "run_id": "r1",
        "kind": kind,
        "step": "" if kind == "workflow" else step,
        "queue": "order@1" if kind == "workflow" else "charge",
        "state": "idle" if kind == "workflow" else "ready",
        "visible_at": None,
        "owner": None,
        "attempt": 0,
        "deadline": None,
    }
    fields.update(changes)
    return TaskState(**fields)


def activity(step: str = "1", name: str = "charge") -> dict[str, Any]:
    return {"kind": "activity", "step": step, "activity": name, "site": "app.py:10"}


def history(*events: tuple[EventType, dict[str, Any]]) -> list[Event]:
    return seal(0, "", [NewEvent(t, d, 100.0 + i) for i, (t, d) in enumerate(events)])


def record(events: list[Event], status: str = "completed", **changes: Any) -> RunRecord:
    run = RunRecord(
        tenant="t",
        run_id="r1",
        workflow="wf",
        version="1",
        status=status,
        input=None,
        input_json="null",
        result=None,
        error=None,
        waiting_for=[],
        last_seq=events[-1].seq,
        last_hash=events[-1].hash,
        processed_seq=events[-1].seq,
        created_at=100.0,
        updated_at=100.0,
        finished_at=None,
    )
    return dataclasses.replace(run, **changes)
