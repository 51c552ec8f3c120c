"""The database's port blackholed for 60 s: a worker on a host of its own (a network
namespace; tests/helpers/netns.py) loses its link to PostgreSQL mid-run, every packet
dropped both ways so its connections hang rather than fail, and gets it back a minute
later. Its runs move again within seconds of the link's return (TCP liveness on by
default gives up the dead connections), no committed step is lost, and no step runs
again unless its attempt had expired (its lease lapsed while the link was down)."""

from __future__ import annotations

import signal
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

import waypost as wp
from tests.helpers import pg_connect
from tests.helpers.netns import NETWORK, can_make_hosts, hosts
from tests.helpers.pgserver import private_postgres
from tests.helpers.workers import acceptance_env, complete_lines, quiet_worker

from . import multiproc_app as app

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

RUNS = 200
LEASE = 4.0
OUTAGE = 60.0  # seconds the link is down


def _count(db: Any, sql: str) -> int:
    row = db.execute(sql).fetchone()
    return int(row[0])


def _until(what: str, check: Any, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)
    return value


def test_a_worker_whose_database_is_blackholed_for_a_minute_goes_on_without_a_repeat(
    tmp_path: Path,
) -> None:
    why = can_make_hosts()
    if why is not None:
        pytest.skip(f"hosts of the test's own cannot be made here: {why}")
    log, stderr = tmp_path / "executions.log", tmp_path / "worker.stderr"
    with private_postgres(NETWORK, listen_addresses="'*'") as server, hosts(1) as (host,):
        engine = wp.Engine(server.url, lease=LEASE)  # serves nothing: starts and reads
        db = pg_connect(server.url, autocommit=True)
        far = f"postgresql://postgres@{host.address}:{server.port}/postgres"
        options = ["--db", far, "--app", "multiproc_app", "--lease", str(LEASE)]
        env = acceptance_env(**{app.LOG_ENV: str(log)})
        worker = quiet_worker(options, env, stderr, host.command())
        try:
            engine.register(*app.ITEMS)
            for x in range(RUNS):
                engine.start(app.multiproc, app.make_input(x), run_id=f"bh-{x:03d}")
            done_sql = "SELECT count(*) FROM events WHERE type = 'ActivityCompleted'"
            third = RUNS * 10 // 3
            try:
                _until("a third of the steps", lambda: _count(db, done_sql) >= third, 120)
            except AssertionError as exc:
                said = stderr.read_text()[-3000:]
                raise AssertionError(f"{exc}; the worker said:\n{said}") from None
            host.cut()
            cut_at = time.time()
            time.sleep(OUTAGE)  # the outage itself
            during = _count(db, done_sql)
            host.mend()
            back = time.time()
            _until("a step after the link is back", lambda: _count(db, done_sql) > during, 60)
            moving_after = time.time() - back
            finished = "SELECT count(*) FROM runs WHERE finished_at IS NOT NULL"
            _until("every run to finish", lambda: _count(db, finished) == RUNS, 180)
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(60) == 0, stderr.read_text()[-3000:]
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.wait()

        executions = complete_lines(log)
        logged: dict[tuple[str, str], list[int]] = defaultdict(list)
        for ex in executions:
            logged[ex["run"], ex["step"]].append(ex["attempt"])
        stats: Counter[str] = Counter()
        for x in range(RUNS):
            rid = f"bh-{x:03d}"
            assert engine.result(rid, timeout=5) == app.expected_result(x), rid
            assert engine.verify(rid) == [], rid
            events = engine.history(rid)
            for step in {ev.data["step"] for ev in events if ev.type == "ActivityScheduled"}:
                where = f"{rid} step {step}"
                mine = [
                    ev
                    for ev in events
                    if ev.type in ("ActivityCompleted", "ActivityFailed")
                    and ev.data["step"] == step
                ]
                completed = [ev.data["attempt"] for ev in mine if ev.type == "ActivityCompleted"]
                assert len(completed) == 1, f"{where}: {mine}"
                ran = logged[rid, step]
                assert sorted(set(ran)) == sorted(ran), f"{where}: an attempt ran twice: {ran}"
                assert max(ran) == completed[0], f"{where}: ran {ran}, completed {completed}"
                for ev in mine:
                    if ev.type != "ActivityFailed":
                        continue
                    kind = ev.data["error"]["type"]
                    # A step runs again only after its attempt expired (or failed on purpose).
                    assert kind in ("ActivityTimeout", "FlakyError"), f"{where}: {ev.data}"
                    stats[kind] += 1
                stats["steps run more than once"] += len(ran) > 1
        assert _count(db, "SELECT count(*) FROM tasks") == 0
        engine.close()
        db.close()
    assert moving_after < 15.0, f"steps moved again only {moving_after:.1f} s after"
    print(
        f"\nblackholed {OUTAGE:.0f} s ({back - cut_at:.1f} s measured); steps moved again "
        f"{moving_after:.1f} s after the link was back; {dict(stats)}"
    )
