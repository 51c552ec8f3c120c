"""A queue's concurrency limit across two `waypost worker` processes, one SIGKILLed.

Two workers serve one database (each store): worker 0 every queue, worker 1 only
`--queues limited,default`. The queue "limited" allows 3 attempts at once. The test
process starts 200 runs of one `limited` attempt each (0.1 s of work, logged at start
and end by the attempt itself) and 10 runs of an activity in queue "side". When 60
attempts have ended, it SIGKILLs the worker that ran more of them, preferably while it
is inside an attempt. Then it checks:

- every run completed with its result;
- at no moment did more than 3 logged attempts overlap, across both processes (an
  attempt of the killed worker ends, at the latest, when it was killed), and 3 did;
- the killed worker's slot came back: the survivor alone ran 3 at once after the kill;
- only worker 0 ran "side" (worker 1 does not serve that queue).

On SQLite one worker may run every attempt until the kill: its own freed slots wake its
claims at once, while the other polls (PostgreSQL wakes both with its notifications).
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

from . import queues_app as app

pytestmark = pytest.mark.timeout(300)

N_RUNS = 200  # the contract
LIMIT = 3  # the contract
KILL_AFTER = 60  # attempts ended before the kill
LEASE = 2.0


def test_a_concurrency_limit_of_3_holds_across_two_workers_through_a_sigkill(
    db_url: str, tmp_path: Path, workers: list[subprocess.Popen[bytes]]
) -> None:
    log = tmp_path / "attempts.log"
    engine = wp.Engine(db_url, lease=LEASE, poll_interval=0.05)  # never runs: serves nothing
    engine.register(app.queued, app.sided, app.limited, app.side)
    try:
        engine.configure_queue("limited", concurrency=LIMIT)
        extras = [[], ["--queues", "limited,default"]]
        logged = (app.LOG_ENV, log)
        start_app_workers(workers, db_url, "queues_app", logged, LEASE, extras, tmp_path)
        runs = [engine.start(app.queued, n, run_id=f"q-{n:03d}") for n in range(N_RUNS)]
        sides = [engine.start(app.sided, n, run_id=f"s-{n:02d}") for n in range(10)]

        side_pids = {r.result(timeout=60)["pid"] for r in sides}
        assert side_pids == {workers[0].pid}, "only worker 0 serves the queue 'side'"
        eventually(
            lambda: sum(e["event"] == "end" for e in json_lines(log)) >= KILL_AFTER,
            f"{KILL_AFTER} attempts to end",
            timeout=120,
        )
        # The worker that ran the most dies (on SQLite, whose workers are not woken by each
        # other's commits, the one that claims as its slots free can take every slot).
        ran = [sum(e["pid"] == w.pid for e in json_lines(log)) for w in workers]
        victim, survivor = (workers[0], workers[1]) if ran[0] >= ran[1] else workers[::-1]

        def inside_an_attempt() -> bool:
            entries = json_lines(log)
            opened = {(e["run"], e["attempt"]) for e in entries if e["pid"] == victim.pid}
            ended = {
                (e["run"], e["attempt"])
                for e in entries
                if e["pid"] == victim.pid and e["event"] == "end"
            }
            return bool(opened - ended)

        deadline = time.monotonic() + 5
        while not inside_an_attempt() and time.monotonic() < deadline:
            pass  # a tight look: the attempts are 0.1 s long
        victim.send_signal(signal.SIGKILL)
        killed_at = time.time()
        victim.wait(30)

        assert [r.result(timeout=180) for r in runs] == list(range(N_RUNS))
    finally:
        engine.close()

    entries = json_lines(log)
    starts = {(e["run"], e["attempt"], e["pid"]): e["t"] for e in entries if e["event"] == "start"}
    ends = {(e["run"], e["attempt"], e["pid"]): e["t"] for e in entries if e["event"] == "end"}
    intervals = []
    for key, began in starts.items():
        if key in ends:
            intervals.append((began, ends[key]))
        else:  # cut short by the SIGKILL
            assert key[2] == victim.pid, f"an attempt of the survivor never ended: {key}"
            intervals.append((began, killed_at))
    assert len(ends) >= N_RUNS
    assert most_at_once(intervals) == LIMIT, "the limit was reached and never exceeded"
    by_victim = [k for k in starts if k[2] == victim.pid]
    assert by_victim, "the killed worker ran attempts before it died"
    survivor_after = [
        (starts[k], ends[k])
        for k in starts
        if k[2] == survivor.pid and k in ends and starts[k] > killed_at
    ]
    assert most_at_once(survivor_after) == LIMIT, "the killed worker's slot came back"
    survivor.send_signal(signal.SIGTERM)
    assert survivor.wait(60) == 0
