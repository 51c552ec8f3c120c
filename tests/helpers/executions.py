"""A log of activity executions kept beside the engine: each execution appends its run,
step, attempt and idempotency key to a file (synced at once, so a crash keeps it), so a
test can tell which steps ran more than once across a restart, a crash or a failover."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import waypost as wp
from waypost.model.chain import verify_chain

from .history import of_type


class ExecutionLog:
    """Activities call `record`; the test points the log at a file of its own first."""

    def __init__(self) -> None:
        self.path: Path | None = None
        self._lock = threading.Lock()

    def use(self, path: Path) -> None:
        self.path = path

    def record(self, ctx: wp.ActivityContext) -> None:
        assert self.path is not None, "use() a file first"
        line = json.dumps(
            {
                "run": ctx.run_id,
                "step": ctx.step_id,
                "attempt": ctx.attempt,
                "key": ctx.idempotency_key,
            }
        )
        with self._lock, open(self.path, "a") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())

    def read(self) -> list[dict[str, Any]]:
        assert self.path is not None, "use() a file first"
        return [json.loads(line) for line in self.path.read_text().splitlines()]


def check_nothing_lost_or_doubled(
    before: dict[str, list[wp.Event]],
    after: dict[str, list[wp.Event]],
    executions: list[dict[str, Any]],
    steps: int,
    note: str = "",
) -> None:
    """What a run's history must keep across a disruption (a restart, a crash, a
    failover), given each run's history `before` it and `after` the run completed:
    nothing committed before was lost or changed, the history verifies, each of the
    `steps` results was applied once, and a step that ran more than once ran as distinct
    attempts under one idempotency key, the committed attempt last. `note` is added to
    each failure's message."""
    for run_id, history in after.items():
        assert [(e.seq, e.hash) for e in before[run_id]] == [
            (e.seq, e.hash) for e in history[: len(before[run_id])]
        ], f"{run_id}: history moved backwards across the disruption {note}"
        assert verify_chain(history, run=("default", run_id)) == [], note
        done = [e.data["step"] for e in of_type(history, "ActivityCompleted")]
        assert sorted(done) == sorted({*done}), f"{run_id}: a step result was applied twice {note}"
        assert len(done) == steps, note
        completed = {
            e.data["step"]: e.data["attempt"] for e in of_type(history, "ActivityCompleted")
        }
        for step, attempt in completed.items():
            ran = sorted(
                x["attempt"] for x in executions if (x["run"], x["step"]) == (run_id, step)
            )
            why = f"{run_id}/{step} ran as attempts {ran} {note}"
            assert len(set(ran)) == len(ran), f"{why}: an attempt ran twice"
            keys = {x["key"] for x in executions if (x["run"], x["step"]) == (run_id, step)}
            assert len(keys) == 1, f"{why}: keys differ"
            assert ran[-1] == attempt, f"{why}: an attempt ran after the committed one"
