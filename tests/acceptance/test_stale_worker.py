"""Stale worker acceptance: a worker frozen past its lease reports after another took over.

Worker A (`waypost worker --app stale_app --lease 1`, a real process) claims
attempt 1 of the run's only activity step and enters its body (it logs that
line and waits for a gate, so it stays inside the body). The test freezes A with
SIGSTOP, at a moment when A holds no database transaction (otherwise the frozen
process would hold locks the other worker needs). Then worker B starts: once A's
lease lapses, B expires attempt 1, runs attempt 2 and completes the run with
attempt 2's result. With A still frozen, the test opens the gate and sends
SIGCONT: A finishes attempt 1's body and reports it. The test checks:

- the report of the stale attempt is recorded as `LateResultIgnored`, naming its
  step, attempt 1 and the fence A held (read from A's task row while A was
  frozen), with attempt 1's result;
- the run is still completed, with attempt 2's result (the attempt that held the
  lease); the step has exactly one `ActivityCompleted` (attempt 2) and attempt 1
  ended in one `ActivityFailed` ("lost its worker", naming A); only the late
  report follows `RunCompleted`; `engine.verify` finds no problem; no task is left;
- the body ran twice (attempt 1 on A, attempt 2 on B) with one idempotency key,
  the key of the step, and the downstream effect keyed by it was applied once,
  by attempt 2; attempt 1's write was a no-op;
- both workers stop cleanly on SIGTERM and logged no error.

It runs on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

import waypost as wp
from tests.helpers import db_query, eventually, of_type
from tests.helpers.workers import acceptance_env, quiet_worker
from waypost.model.events import TERMINAL_EVENTS, Event
from waypost.model.records import RunInfo
from waypost.model.status import RunStatus
from waypost.runtime.instance import idempotency_key

from . import stale_app as app

LEASE = 1.0
RUN_ID = "stale-1"
ORDER_ID = "o-1"
STEP = "1"  # the workflow's only step
READY_TIMEOUT = 30.0  # a worker process starts and registers
STEP_TIMEOUT = 30.0  # the run reaches a point the test waits for
STOP_TIMEOUT = 30.0  # a worker stops after SIGTERM

T = TypeVar("T")


@dataclass
class WorkerProc:
    name: str
    proc: subprocess.Popen[bytes]
    stderr: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stopped(self) -> bool:
        """True while the process is stopped by a signal (state T in /proc)."""
        try:
            stat = Path(f"/proc/{self.pid}/stat").read_text()
        except FileNotFoundError:
            return False
        return stat[stat.rfind(")") + 2] == "T"


@dataclass
class Workers:
    url: str
    tmp: Path
    started: list[WorkerProc]

    @property
    def log(self) -> Path:
        return self.tmp / "executions.log"

    @property
    def gate(self) -> Path:
        return self.tmp / "gate"

    @property
    def ledger(self) -> Path:
        return self.tmp / "ledger.db"

    def start(self, name: str) -> WorkerProc:
        files = {app.LOG_ENV: self.log, app.GATE_ENV: self.gate, app.LEDGER_ENV: self.ledger}
        env = acceptance_env(**{var: str(path) for var, path in files.items()})
        stderr = self.tmp / f"worker-{name}.stderr"
        options = ["--db", self.url, "--app", "stale_app", "--lease", str(LEASE), "--grace", "5"]
        proc = quiet_worker(options, env, stderr)
        worker = WorkerProc(name, proc, stderr)
        self.started.append(worker)
        return worker

    def check_alive(self) -> None:
        for w in self.started:
            if w.proc.poll() is not None:
                raise AssertionError(
                    f"worker {w.name} (pid {w.pid}) exited with {w.proc.returncode}:\n"
                    + w.stderr.read_text()
                )

    def wait(self, what: str, check: Callable[[], T], timeout: float = STEP_TIMEOUT) -> T:
        """Poll `check` until it returns something truthy, failing early if a worker died."""

        def probe() -> T:
            self.check_alive()
            return check()

        return eventually(probe, what, timeout)

    def owner(self, worker: WorkerProc) -> str:
        """The worker id a worker process registered under (waits for it)."""
        sql = "SELECT worker_id FROM workers WHERE pid = ?"

        def registered() -> str:
            rows = db_query(self.url, sql, (worker.pid,))
            return str(rows[0][0]) if rows else ""

        return self.wait(f"worker {worker.name} to register", registered, READY_TIMEOUT)

    def cleanup(self) -> None:
        """End every worker this test started, by its pid, stopped ones included."""
        for w in self.started:
            if w.proc.poll() is None:
                w.proc.send_signal(signal.SIGCONT)
                w.proc.kill()
            w.proc.wait()


@pytest.fixture
def workers(db_url: str, tmp_path: Path) -> Iterator[Workers]:
    ws = Workers(db_url, tmp_path, [])
    try:
        yield ws
    finally:
        ws.cleanup()


def _no_open_write_transaction(db_url: str) -> bool:
    """True if no other connection holds a transaction that writers would wait for."""
    if db_url.startswith("sqlite:///"):
        conn = sqlite3.connect(db_url.removeprefix("sqlite:///"), timeout=0, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")  # fails at once if another connection writes
            conn.execute("ROLLBACK")
            return True
        except sqlite3.OperationalError:
            return False
        finally:
            conn.close()
    rows = db_query(
        db_url,
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
        " AND pid <> pg_backend_pid() AND xact_start IS NOT NULL",
    )
    return rows[0][0] == 0


def _freeze_between_transactions(workers: Workers, worker: WorkerProc) -> None:
    """SIGSTOP the worker at a moment when it holds no transaction open.

    A process frozen inside a transaction would hold the SQLite write lock (or
    PostgreSQL row locks) and block the worker that is to take over. If the stop
    lands inside one, the worker is let go on and stopped again.
    """

    def frozen_outside_a_transaction() -> bool:
        worker.proc.send_signal(signal.SIGSTOP)
        eventually(worker.stopped, f"worker {worker.name} to stop", STEP_TIMEOUT)
        if _no_open_write_transaction(workers.url):
            return True
        worker.proc.send_signal(signal.SIGCONT)
        eventually(lambda: not worker.stopped(), f"worker {worker.name} to go on", STEP_TIMEOUT)
        return False

    workers.wait(
        f"worker {worker.name} frozen outside a transaction",
        frozen_outside_a_transaction,
        STEP_TIMEOUT,
    )


def _step_events(events: list[Event], type_: str) -> list[Event]:
    return [ev for ev in of_type(events, type_) if ev.data.get("step") == STEP]


def _logged(workers: Workers, marker: str) -> list[dict[str, Any]]:
    return [line for line in app.read_log(workers.log) if line["marker"] == marker]


def _worker_problems(worker: WorkerProc) -> list[str]:
    lines = worker.stderr.read_text().splitlines()
    return [
        f"worker {worker.name}: {line}"
        for line in lines
        if "Traceback" in line or " ERROR " in line or " CRITICAL " in line
    ]


@pytest.mark.timeout(120)
def test_a_stale_worker_reports_after_the_takeover_and_its_result_is_ignored(
    workers: Workers, db_url: str
) -> None:
    began = time.monotonic()
    # This engine only starts the run and reads: it serves nothing.
    engine = wp.Engine(db_url, lease=LEASE)
    try:
        engine.register(*app.ITEMS)
        a = workers.start("a")
        owner_a = workers.owner(a)
        engine.start(app.stale, ORDER_ID, run_id=RUN_ID)
        key = idempotency_key("default", RUN_ID, STEP)

        # Attempt 1 is inside its body on worker A.
        entered = workers.wait(
            "attempt 1 to enter its body",
            lambda: [line for line in _logged(workers, "entered") if line["attempt"] == 1],
        )
        assert [(e["pid"], e["step"], e["key"]) for e in entered] == [(a.pid, STEP, key)]

        _freeze_between_transactions(workers, a)
        frozen_at = time.monotonic()
        tasks_sql = (
            "SELECT owner, fence, attempt, state FROM tasks"
            " WHERE run_id = ? AND kind = 'activity' AND step = ?"
        )
        held = db_query(db_url, tasks_sql, (RUN_ID, STEP))
        assert len(held) == 1, held
        holder, stale_fence, attempt, state = held[0]
        assert (holder, attempt, state) == (owner_a, 1, "leased"), held[0]

        # Worker B takes the step over once A's lease lapses, and completes the run.
        b = workers.start("b")
        owner_b = workers.owner(b)
        assert owner_b != owner_a

        def completed() -> RunInfo | None:
            run = engine.get(RUN_ID)
            return run if run.status == RunStatus.COMPLETED else None

        info = workers.wait("the run to complete without worker A", completed)
        taken_over_in = time.monotonic() - frozen_at
        assert a.stopped(), "worker A went on before the test let it"
        assert info.result == "attempt 2"

        events = engine.history(RUN_ID)
        assert not of_type(events, "LateResultIgnored"), events
        lost = _step_events(events, "ActivityFailed")
        assert len(lost) == 1, events
        assert lost[0].data["attempt"] == 1 and lost[0].data["retrying"], lost[0]
        assert lost[0].data["error"]["type"] == "ActivityTimeout", lost[0]
        assert f"lost its worker ({owner_a} stopped renewing" in lost[0].data["error"]["message"]
        done = _step_events(events, "ActivityCompleted")
        assert [(ev.data["attempt"], ev.data["result"]) for ev in done] == [(2, "attempt 2")]
        assert [(e["attempt"], e["pid"]) for e in _logged(workers, "entered")] == [
            (1, a.pid),
            (2, b.pid),
        ]
        assert [(e["attempt"], e["applied"]) for e in _logged(workers, "effect")] == [(2, True)]

        # A goes on: attempt 1 finishes its body and reports, late.
        workers.gate.touch()
        a.proc.send_signal(signal.SIGCONT)
        continued_at = time.monotonic()
        late = workers.wait(
            "the stale report to be recorded",
            lambda: of_type(engine.history(RUN_ID), "LateResultIgnored"),
        )
        late_in = time.monotonic() - continued_at

        # The stale report is an audit fact naming the stale attempt and its fence.
        assert len(late) == 1, late
        assert late[0].data["step"] == STEP, late[0]
        assert late[0].data["attempt"] == 1, late[0]
        assert late[0].data["fence"] == stale_fence, (late[0], stale_fence)
        assert late[0].data["outcome"] == "completed", late[0]
        assert late[0].data["result"] == "attempt 1", late[0]

        # It changed nothing: the run keeps the result of the attempt that held the lease.
        events = engine.history(RUN_ID)
        info = engine.get(RUN_ID)
        assert info.status == RunStatus.COMPLETED, info
        assert info.result == "attempt 2", info
        assert engine.result(RUN_ID, timeout=5) == "attempt 2"
        done = _step_events(events, "ActivityCompleted")
        assert len(done) == 1, f"{len(done)} ActivityCompleted for step {STEP}: {done}"
        assert done[0].data["attempt"] == 2 and done[0].data["result"] == "attempt 2", done[0]
        assert len(_step_events(events, "ActivityFailed")) == 1, events
        scheduled = _step_events(events, "ActivityScheduled")
        assert len(scheduled) == 1 and scheduled[0].data["key"] == key, scheduled
        ends = [k for k, ev in enumerate(events) if ev.type in TERMINAL_EVENTS]
        assert len(ends) == 1 and events[ends[0]].type == "RunCompleted", events
        assert [ev.type for ev in events[ends[0] + 1 :]] == ["LateResultIgnored"], events
        assert events[-1].seq == late[0].seq == info.last_seq, (events[-1], late[0], info)
        assert engine.verify(RUN_ID) == []
        assert db_query(db_url, "SELECT count(*) FROM tasks WHERE run_id = ?", (RUN_ID,)) == [(0,)]

        # The body ran twice with one idempotency key; the effect was applied once.
        entered = _logged(workers, "entered")
        assert [(e["attempt"], e["pid"], e["key"]) for e in entered] == [
            (1, a.pid, key),
            (2, b.pid, key),
        ]
        effects = _logged(workers, "effect")
        assert sorted((e["attempt"], e["pid"], e["applied"]) for e in effects) == [
            (1, a.pid, False),
            (2, b.pid, True),
        ], effects
        returned = _logged(workers, "returning")
        assert sorted((e["attempt"], e["result"]) for e in returned) == [
            (1, "attempt 1"),
            (2, "attempt 2"),
        ]
        assert app.read_ledger(workers.ledger) == [(key, RUN_ID, ORDER_ID, 2, b.pid)]

        # Both workers stop cleanly and logged no error.
        for w in (a, b):
            w.proc.send_signal(signal.SIGTERM)
        codes = {w.name: w.proc.wait(timeout=STOP_TIMEOUT) for w in (a, b)}
        assert codes == {"a": 0, "b": 0}, codes
        problems = _worker_problems(a) + _worker_problems(b)
        assert not problems, "the workers reported errors:\n" + "\n".join(problems)
    finally:
        engine.close()

    print(
        f"\nworker B completed the run {taken_over_in:.1f}s after worker A froze "
        f"(lease {LEASE}s); A's late report recorded {late_in:.1f}s after SIGCONT; "
        f"test {time.monotonic() - began:.1f}s"
    )
