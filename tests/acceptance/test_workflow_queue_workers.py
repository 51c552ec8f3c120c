"""A workflow queue's concurrency across two `waypost worker` processes, one SIGKILLed.

Two workers serve one database (each store). The workflow queue "wlimited" admits 3
runs at once. The test process (which serves nothing) starts 60 runs of two logged
steps each on it. When 20 runs have completed, it SIGKILLs the worker that ran more
steps, preferably inside one. Then, from the runs' histories (`RunAdmitted` to
`RunCompleted`, the slot each run held):

- every run completed with its result, and was admitted once;
- at no moment were more than 3 runs admitted and unfinished, and 3 were;
- the killed worker's runs kept their slots until they were taken over and finished,
  and none leaked: the runs admitted after the kill reached 3 at once again.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

import waypost as wp
from tests.helpers import eventually
from tests.helpers.workers import json_lines, most_at_once, start_app_workers
from waypost.model.events import EventType

from . import queues_app as app

pytestmark = pytest.mark.timeout(300)

N_RUNS = 60
LIMIT = 3
KILL_AFTER = 20  # runs completed before the kill
LEASE = 2.0


def test_a_workflow_queue_of_3_holds_across_two_workers_through_a_sigkill(
    db_url: str, tmp_path: Path, workers: list[subprocess.Popen[bytes]]
) -> None:
    log = tmp_path / "steps.log"
    engine = wp.Engine(db_url, lease=LEASE, poll_interval=0.05)  # never runs: serves nothing
    engine.register(app.wqueued, app.report_step)
    try:
        engine.configure_queue("wlimited", concurrency=LIMIT)
        extras = [[], []]
        logged = (app.LOG_ENV, log)
        start_app_workers(workers, db_url, "queues_app", logged, LEASE, extras, tmp_path)
        runs = [engine.start(app.wqueued, n, run_id=f"w-{n:03d}") for n in range(N_RUNS)]
        assert engine.queue("wlimited").runs_enqueued >= N_RUNS - LIMIT
        eventually(
            lambda: len(engine.list_runs(status="completed", limit=N_RUNS)) >= KILL_AFTER,
            f"{KILL_AFTER} runs to complete",
            timeout=120,
        )
        ran = [sum(e["pid"] == w.pid for e in json_lines(log)) for w in workers]
        victim = workers[0] if ran[0] >= ran[1] else workers[1]

        def inside_a_step() -> bool:
            entries = [e for e in json_lines(log) if e["pid"] == victim.pid]
            opened = {(e["run"], e["step"], e["attempt"]) for e in entries}
            ended = {(e["run"], e["step"], e["attempt"]) for e in entries if e["event"] == "end"}
            return bool(opened - ended)

        deadline = time.monotonic() + 5
        while not inside_a_step() and time.monotonic() < deadline:
            pass  # a tight look: the steps are short
        victim.send_signal(signal.SIGKILL)
        killed_at = time.time()
        victim.wait(30)

        assert [r.result(timeout=180) for r in runs] == list(range(N_RUNS))
        held: list[tuple[float, float]] = []
        for r in runs:
            history = engine.history(r.run_id)
            admitted = [ev.ts for ev in history if ev.type == EventType.RUN_ADMITTED]
            ended = [ev.ts for ev in history if ev.type == EventType.RUN_COMPLETED]
            assert len(admitted) == 1 and len(ended) == 1, r.run_id
            held.append((admitted[0], ended[0]))
        q = engine.queue("wlimited")
        assert (q.runs_enqueued, q.runs_admitted) == (0, 0)
    finally:
        engine.close()

    assert most_at_once(held) == LIMIT, "the limit was reached and never exceeded"
    after = [h for h in held if h[0] > killed_at]
    assert after, "runs were admitted after the kill"
    assert most_at_once(after) == LIMIT, "no slot leaked: 3 at once again after the kill"
    survivor = workers[1] if victim is workers[0] else workers[0]
    survivor.send_signal(signal.SIGTERM)
    assert survivor.wait(60) == 0
