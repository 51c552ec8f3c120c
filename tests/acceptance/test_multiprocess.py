"""Multi-process acceptance: three worker processes on one PostgreSQL database, one lost:
SIGKILLed, or (`cut`) on a host of its own whose network is cut off mid-step and mended
once the others have finished its runs.

Three `waypost worker --app multiproc_app --lease 4` processes serve one fresh
database. The test process starts 500 runs of a workflow of ten activity steps
(`multiproc_app.multiproc`: sync and async activities, two gathered pairs, a
short durable timer, and in every tenth run a step that fails once on purpose)
through its own engine, which serves nothing. When about half of all steps
have completed, it kills the worker holding the most leased activity tasks with
SIGKILL and leaves the other two running: they must take over the dead
worker's runs once its leases lapse. Then it stops the survivors (SIGTERM) and
checks:

- every run completed, with the result its input determines;
- in every history each scheduled step has exactly one ActivityCompleted (no
  step result applied twice); histories are numbered 1..n without gaps and
  hash-chained (`verify_chain` and `engine.verify`);
- for every step, the logged executions have unique attempt numbers and one
  idempotency key; the completed attempt was executed; no attempt was executed
  after the completed one; every attempt below the completed one ended in
  exactly one ActivityFailed, which is explained: the on-purpose failure of
  `flaky` (executed, attempt 1) or "lost its worker" naming the killed worker
  (which, if it was executed at all, executed it);
- no task or pending timer is left, the survivors stopped cleanly, and no
  worker logged an error;
- the work was spread: at least two workers executed steps, the killed worker
  executed some before it died, and the survivors finished its runs.

In the `cut` variant each worker runs in a network namespace of its own (three "hosts",
veth links to the database's; tests/helpers/netns.py) and the lost one is cut off, not
killed: it runs on, its leases lapse, the others take its work up within the lease and a
little more, and when its link is mended its late results are recorded as ignored
(fenced), none of its attempts completes a step, and it stops cleanly.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest

import waypost as wp
from tests.helpers import pg_connect
from tests.helpers.netns import NETWORK, Host, can_make_hosts, hosts
from tests.helpers.pgserver import private_postgres
from tests.helpers.workers import acceptance_env, complete_lines, quiet_worker
from waypost.model.chain import verify_chain
from waypost.model.events import TERMINAL_EVENTS, Event
from waypost.runtime.instance import idempotency_key

from . import multiproc_app as app

N_RUNS = 500  # the contract
N_WORKERS = 3  # the contract
STEPS = app.ACTIVITY_STEPS  # the contract: a 10-step workflow
LEASE = 4.0  # live workers renew every 1.3 s; only a stall of 4 s loses a lease
KILL_AFTER = N_RUNS * STEPS // 2  # completed steps (ActivityCompleted events) before the kill
READY_TIMEOUT = 30.0
HALFWAY_TIMEOUT = 120.0
FINISH_TIMEOUT = 120.0  # after the kill
STOP_TIMEOUT = 60.0
POLL = 0.05  # how often the test looks at the database while it waits


def run_id(x: int) -> str:
    return f"mp-{x:03d}"


@dataclass
class WorkerProc:
    index: int
    proc: subprocess.Popen[bytes]
    stderr: Path
    killed: bool = False
    owner: str = ""
    host: Host | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def describe(self) -> str:
        return f"worker {self.index} (pid {self.pid}, {self.owner or 'not registered yet'})"


@dataclass
class Kill:
    victim: WorkerProc
    completed_steps: int
    leased: dict[str, int]  # owner -> leased activity tasks at the moment of the kill
    held: list[tuple[str, str]]  # the victim's leased activity tasks (run, step) then
    at: float
    seconds_in: float


@dataclass
class Cluster:
    url: str
    tmp: Path
    log: Path
    workers: list[WorkerProc] = field(default_factory=list)
    hosts: list[Host] = field(default_factory=list)  # cut: one for each worker
    port: int = 0  # cut: the database's port, as every host reaches it

    @property
    def loss(self) -> str:
        return "cut" if self.hosts else "sigkill"

    def start(self) -> None:
        env = acceptance_env(**{app.LOG_ENV: str(self.log)})
        for i in range(N_WORKERS):
            url, host = self.url, None
            if self.hosts:
                host = self.hosts[i]
                url = f"postgresql://postgres@{host.address}:{self.port}/postgres"
            options = ["--db", url, "--app", "multiproc_app", "--lease", str(LEASE)]
            stderr = self.tmp / f"worker-{i}.stderr"
            proc = quiet_worker(options, env, stderr, host.command() if host else ())
            self.workers.append(WorkerProc(i, proc, stderr, host=host))

    def stop(self) -> dict[int, int]:
        """SIGTERM the live workers and wait for them; their return codes by index."""
        alive = [w for w in self.workers if not w.killed and w.proc.poll() is None]
        for w in alive:
            w.proc.send_signal(signal.SIGTERM)
        codes = {}
        for w in self.workers:
            if not w.killed:
                codes[w.index] = w.proc.wait(timeout=STOP_TIMEOUT)
        return codes

    def kill_all(self) -> None:
        """Clean-up after a failure: end the workers this test started, by their pid."""
        for w in self.workers:
            if w.proc.poll() is None:
                w.proc.kill()
                w.proc.wait()

    def check_alive(self) -> None:
        for w in self.workers:
            if not w.killed and w.proc.poll() is not None:
                raise AssertionError(
                    f"{w.describe()} exited with {w.proc.returncode}:\n{w.stderr.read_text()}"
                )

    def by_pid(self) -> dict[int, WorkerProc]:
        return {w.pid: w for w in self.workers}

    def executions(self) -> list[dict[str, Any]]:
        """The logged executions (complete lines only: a worker may be writing one now)."""
        return complete_lines(self.log)


def _wait(
    cluster: Cluster,
    what: str,
    check: Callable[[], Any],
    timeout: float,
    diagnose: Callable[[], str] = lambda: "",
) -> Any:
    """Poll `check` (and that no worker died) until it returns something truthy."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        cluster.check_alive()
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{diagnose()}")
        time.sleep(POLL)


@pytest.fixture(params=["sigkill", "cut"])
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    log = tmp_path / "executions.log"
    if request.param == "sigkill":
        c = Cluster(request.getfixturevalue("fresh_postgres"), tmp_path, log)
        try:
            yield c
        finally:
            c.kill_all()
        return
    why = can_make_hosts()
    if why is not None:
        pytest.skip(f"hosts of the test's own cannot be made here: {why}")
    with private_postgres(NETWORK, listen_addresses="'*'") as server, hosts(N_WORKERS) as made:
        c = Cluster(server.url, tmp_path, log, hosts=made, port=server.port)
        try:
            yield c
        finally:
            c.kill_all()


def _count(db: psycopg.Connection[Any], sql: str, *params: Any) -> int:
    row = db.execute(sql, params).fetchone()
    assert row is not None
    return int(row[0])


def _stuck(db: psycopg.Connection[Any]) -> str:
    """What unfinished runs wait for, and their tasks: to diagnose a stall."""
    statuses = db.execute("SELECT status, count(*) FROM runs GROUP BY status").fetchall()
    runs = db.execute(
        "SELECT run_id, status, waiting_for, last_seq FROM runs"
        " WHERE status NOT IN ('completed', 'failed', 'cancelled', 'terminated')"
        " ORDER BY run_id LIMIT 10"
    ).fetchall()
    lines = [f"run statuses: {dict(statuses)}"]
    for rid, status, waiting, last_seq in runs:
        tasks = db.execute(
            "SELECT kind, step, state, owner, fence, attempt, visible_at - extract(epoch from now())"
            " FROM tasks WHERE run_id = %s ORDER BY kind DESC, step",
            (rid,),
        ).fetchall()
        last = db.execute(
            "SELECT seq, type, data FROM events WHERE run_id = %s ORDER BY seq DESC LIMIT 3",
            (rid,),
        ).fetchall()
        lines.append(f"{rid} {status} seq {last_seq} waiting {waiting}: tasks {tasks}; last {last}")
    return "\n".join(lines)


def _kill_halfway(cluster: Cluster, db: psycopg.Connection[Any], started: float) -> Kill:
    """SIGKILL the worker holding the most leased activity tasks once half the steps are done
    (or cut its host off)."""
    completed_sql = "SELECT count(*) FROM events WHERE type = 'ActivityCompleted'"
    _wait(
        cluster,
        f"{KILL_AFTER} completed steps",
        lambda: _count(db, completed_sql) >= KILL_AFTER,
        HALFWAY_TIMEOUT,
        lambda: _stuck(db),
    )
    owners = {pid: wid for wid, pid in db.execute("SELECT worker_id, pid FROM workers")}
    for w in cluster.workers:
        w.owner = owners[w.pid]

    def pick() -> tuple[WorkerProc, dict[str, int]] | None:
        leased = dict(
            db.execute(
                "SELECT owner, count(*) FROM tasks WHERE kind = 'activity' AND state = 'leased'"
                " GROUP BY owner"
            ).fetchall()
        )
        w = max(cluster.workers, key=lambda w: leased.get(w.owner, 0))
        return (w, leased) if leased.get(w.owner, 0) else None

    victim, leased = _wait(cluster, "a worker with leased activity tasks", pick, 30.0)
    held_sql = (
        "SELECT run_id, step FROM tasks WHERE kind = 'activity' AND state = 'leased' AND owner = %s"
    )
    held = [(r, s) for r, s in db.execute(held_sql, (victim.owner,)).fetchall()]
    at = time.time()
    if victim.host is not None:
        victim.host.cut()
    else:
        os.kill(victim.pid, signal.SIGKILL)
        victim.killed = True
        assert victim.proc.wait(timeout=30) == -signal.SIGKILL
    return Kill(
        victim=victim,
        completed_steps=_count(db, completed_sql),
        leased=leased,
        held=held,
        at=at,
        seconds_in=time.monotonic() - started,
    )


def _check_history(rid: str, events: list[Event]) -> None:
    assert [ev.seq for ev in events] == list(range(1, len(events) + 1)), f"{rid}: gaps"
    problems = verify_chain(events, run=("default", rid))
    assert problems == [], f"{rid}: {problems}"
    ends = [k for k, ev in enumerate(events) if ev.type in TERMINAL_EVENTS]
    assert len(ends) == 1 and events[ends[0]].type == "RunCompleted", f"{rid}: {events[-3:]}"
    after = [ev for ev in events[ends[0] + 1 :] if ev.type != "LateResultIgnored"]
    assert not after, f"{rid}: events after the run ended: {after}"
    timers = Counter(ev.type for ev in events if ev.type.startswith("Timer"))
    assert timers == {"TimerStarted": 1, "TimerFired": 1}, f"{rid}: timers {timers}"


def _check_steps(
    rid: str,
    x: int,
    events: list[Event],
    logged: dict[str, list[dict[str, Any]]],
    kill: Kill,
    stats: Counter[str],
) -> None:
    scheduled: dict[str, Event] = {}
    for ev in events:
        if ev.type == "ActivityScheduled":
            assert ev.data["step"] not in scheduled, (
                f"{rid}: step {ev.data['step']} scheduled twice"
            )
            scheduled[ev.data["step"]] = ev
    assert len(scheduled) == STEPS, f"{rid}: steps {sorted(scheduled)}"
    unknown = set(logged) - set(scheduled)
    assert not unknown, f"{rid}: executions of steps the history does not schedule: {unknown}"

    victim = kill.victim
    for step, sched in scheduled.items():
        where = f"{rid} step {step} ({sched.data['activity']})"
        runs = logged.get(step, [])
        attempts = [ex["attempt"] for ex in runs]
        dupes = sorted(a for a, k in Counter(attempts).items() if k > 1)
        assert not dupes, f"{where}: attempt(s) {dupes} were executed more than once: {runs}"
        keys = {ex["key"] for ex in runs}
        assert sched.data["key"] == idempotency_key("default", rid, step), where
        assert keys == {sched.data["key"]}, f"{where}: idempotency keys {keys}"
        activities = {ex["activity"] for ex in runs}
        assert activities <= {sched.data["activity"]}, f"{where}: executed as {activities}"

        outcomes = [
            ev
            for ev in events
            if ev.type in ("ActivityCompleted", "ActivityFailed") and ev.data["step"] == step
        ]
        completed = [ev for ev in outcomes if ev.type == "ActivityCompleted"]
        assert len(completed) == 1, f"{where}: {len(completed)} ActivityCompleted: {outcomes}"
        final = completed[0].data["attempt"]
        assert final in attempts, f"{where}: completed attempt {final} was never executed {runs}"
        later = sorted(a for a in attempts if a > final)
        assert not later, f"{where}: attempt(s) {later} executed after attempt {final} completed"

        failed = [ev for ev in outcomes if ev.type == "ActivityFailed"]
        assert sorted(ev.data["attempt"] for ev in failed) == list(range(1, final)), (
            f"{where}: attempt {final} completed, but the failed attempts are {failed}"
        )
        by_attempt = {ex["attempt"]: ex for ex in runs}
        for ev in failed:
            n = ev.data["attempt"]
            error = ev.data["error"]
            assert ev.data["retrying"], f"{where}: a failure ended the step: {ev}"
            if error["type"] == "FlakyError":
                assert sched.data["activity"] == "flaky" and x % 10 == 3 and n == 1, (
                    f"{where}: unexpected failure {ev}"
                )
                assert n in by_attempt, f"{where}: attempt {n} failed but was never executed"
                stats["failed on purpose"] += 1
            elif error["type"] == "ActivityTimeout" and "lost its worker" in error["message"]:
                assert f"({victim.owner} stopped renewing" in error["message"], (
                    f"{where}: attempt {n} lost a worker that was not killed: {ev}"
                )
                ex = by_attempt.get(n)
                assert ex is None or ex["pid"] == victim.pid, (
                    f"{where}: attempt {n} lost the killed worker but {ex} executed it"
                )
                stats["attempts lost with the killed worker"] += 1
                stats["lost attempts it had started executing"] += ex is not None
            else:
                raise AssertionError(
                    f"{where}: attempt {n} failed for no reason of this test: {ev}"
                )
        if x % 10 == 3 and sched.data["activity"] == "flaky":
            assert failed and failed[0].data["error"]["type"] in ("FlakyError", "ActivityTimeout")
        for ev in events:
            if ev.type == "LateResultIgnored" and ev.data["step"] == step:
                assert ev.data["attempt"] in attempts, f"{where}: {ev} was never executed"
                stats["late results ignored"] += 1
        stats["steps"] += 1
        stats["steps executed more than once"] += len(runs) > 1
        stats[f"steps completed by {by_attempt[final]['pid']}"] += 1


@pytest.mark.slow
def test_three_workers_one_lost_complete_500_runs_without_applying_a_step_twice(
    cluster: Cluster,
) -> None:
    started = time.monotonic()
    cluster.start()
    db = pg_connect(cluster.url, autocommit=True)
    engine = wp.Engine(cluster.url, lease=LEASE, poll_interval=POLL)
    try:
        engine.register(*app.ITEMS)
        pids = {w.pid for w in cluster.workers}
        _wait(
            cluster,
            "the workers to register",
            lambda: {pid for (pid,) in db.execute("SELECT pid FROM workers")} == pids,
            READY_TIMEOUT,
        )
        ready = time.monotonic()
        for x in range(N_RUNS):
            engine.start(app.multiproc, app.make_input(x), run_id=run_id(x))
        starting = time.monotonic() - ready

        kill = _kill_halfway(cluster, db, ready)
        survivors = [w for w in cluster.workers if not w.killed]
        _wait(
            cluster,
            f"all {N_RUNS} runs to finish after the kill",
            lambda: _count(db, "SELECT count(*) FROM runs WHERE finished_at IS NOT NULL") == N_RUNS,
            FINISH_TIMEOUT,
            lambda: _stuck(db),
        )
        finished = time.monotonic()
        late_sql = "SELECT count(*) FROM events WHERE type = 'LateResultIgnored'"
        if kill.victim.host is not None:
            # Back: what it did while cut off reaches the database, fenced.
            kill.victim.host.mend()
            _wait(cluster, "the cut-off worker's late results", lambda: _count(db, late_sql), 60)
        codes = cluster.stop()
        assert codes == {w.index: 0 for w in survivors}, f"survivors stopped with {codes}"

        # Every run completed with the result its input determines.
        statuses = dict(db.execute("SELECT status, count(*) FROM runs GROUP BY status").fetchall())
        assert statuses == {"completed": N_RUNS}, _stuck(db)
        for x in range(N_RUNS):
            assert engine.result(run_id(x), timeout=5) == app.expected_result(x), run_id(x)
        assert _count(db, "SELECT count(*) FROM tasks") == 0, "tasks left behind"
        assert _count(db, "SELECT count(*) FROM timers WHERE status = 'pending'") == 0

        # The histories, against the execution log.
        executions = cluster.executions()
        logged: dict[str, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
        for ex in executions:
            logged[ex["run"]][ex["step"]].append(ex)
        unknown = set(logged) - {run_id(x) for x in range(N_RUNS)}
        assert not unknown, f"executions of unknown runs: {sorted(unknown)}"
        stats: Counter[str] = Counter()
        histories: dict[str, list[Event]] = {}
        for x in range(N_RUNS):
            rid = run_id(x)
            events = histories[rid] = engine.history(rid)
            _check_history(rid, events)
            assert engine.verify(rid) == [], rid
            _check_steps(rid, x, events, logged[rid], kill, stats)
        assert stats["steps"] == N_RUNS * STEPS

        # The work was spread, and the survivors took over the killed worker's runs.
        by_pid = Counter(ex["pid"] for ex in executions)
        before = Counter(ex["pid"] for ex in executions if ex["t"] < kill.at)
        after = Counter(ex["pid"] for ex in executions if ex["t"] >= kill.at)
        assert set(by_pid) <= pids, f"executions by unknown processes: {by_pid}"
        assert len(by_pid) >= 2, f"one worker did all the work: {by_pid}"
        assert before[kill.victim.pid] > 0, f"the killed worker executed nothing: {by_pid}"
        if cluster.loss == "sigkill":
            assert after[kill.victim.pid] == 0, f"the killed worker executed after death: {after}"
        else:
            # What it ran while cut off (attempts it held) completed nothing: fenced.
            for ex in executions:
                if ex["pid"] == kill.victim.pid and ex["t"] >= kill.at:
                    done = [
                        ev.data["attempt"]
                        for ev in histories[ex["run"]]
                        if ev.type == "ActivityCompleted" and ev.data["step"] == ex["step"]
                    ]
                    assert done != [ex["attempt"]], f"a cut-off attempt completed a step: {ex}"
            assert stats["late results ignored"] > 0, f"no late result was fenced: {stats}"
        # The steps it held moved to the others within the lease and a little more.
        moved = [
            min(
                ex["t"] - kill.at
                for ex in logged[rid][step]
                if ex["pid"] != kill.victim.pid and ex["t"] >= kill.at
            )
            for rid, step in kill.held
            if any(ex["pid"] != kill.victim.pid for ex in logged[rid][step])
        ]
        stats["seconds until its held steps ran elsewhere (most)"] = round(max(moved, default=0))
        assert max(moved, default=0) < LEASE + 6, f"its steps moved only after {moved}"
        assert stats["attempts lost with the killed worker"] > 0, (
            f"the kill lost no attempt (leased at the kill: {kill.leased}): {stats}"
        )

        problems = []
        warnings: Counter[int] = Counter()
        for w in cluster.workers:
            lines = w.stderr.read_text().splitlines()
            warnings[w.index] = sum(1 for line in lines if " WARNING " in line)
            problems += [
                f"{w.describe()}: {line}"
                for line in lines
                if "Traceback" in line or " ERROR " in line or " CRITICAL " in line
            ]
        assert not problems, "the workers reported errors:\n" + "\n".join(problems[:50])
    finally:
        engine.close()
        db.close()

    def share(w: WorkerProc) -> str:
        done = stats[f"steps completed by {w.pid}"]
        return (
            f"{w.describe()}{' [killed]' if w.killed else ''}: executed {by_pid[w.pid]} "
            f"({before[w.pid]} before the kill, {after[w.pid]} after), completed {done} steps, "
            f"{warnings[w.index]} warnings"
        )

    print(
        f"\n{N_RUNS} runs x {STEPS} steps on {N_WORKERS} workers: started in {starting:.1f}s; "
        f"lost ({cluster.loss}) {kill.victim.describe()} at {kill.seconds_in:.1f}s with "
        f"{kill.completed_steps} steps completed and leased activity tasks {kill.leased}; "
        f"all finished {finished - ready:.1f}s after the workers were ready "
        f"({finished - ready - kill.seconds_in:.1f}s after the kill); "
        f"test {time.monotonic() - started:.1f}s\n"
        + "\n".join(share(w) for w in cluster.workers)
        + f"\n{len(executions)} executions; "
        + ", ".join(f"{k}: {v}" for k, v in sorted(stats.items()) if not k.startswith("steps c"))
    )
