"""Crash acceptance: SIGKILL the engine process at many points, restart it, check the guarantees.

The engine runs in a subprocess (`crash_app.py`) whose fault plan kills it
with SIGKILL at the n-th hit of one fault point (commits, activity attempts,
timer firings). The test process starts the runs, sends the signals they
wait for at varying moments (through its own engine on the same SQLite
file), restarts the subprocess after every kill and, after each
subprocess, checks that no run's history moved backwards (every earlier
history is a prefix of the new one, which is gap-free and hash-chained) and
that the engine logged no error. At the end, a subprocess without faults
finishes the work and the test checks:

- every run completed, with the result its input and signals determine;
- no step was executed again after its result was committed, and no
  attempt of a step was executed twice;
- every attempt of a step carried the same idempotency key;
- every attempt outcome in the history comes from a logged execution (or,
  for a crashed attempt, from the lease expiry that replaced it);
- every history is numbered without gaps and hash-chained.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import waypost as wp
from tests.helpers.workers import complete_lines
from waypost.model.chain import verify_chain
from waypost.model.events import TERMINAL_EVENTS, Event
from waypost.runtime.instance import idempotency_key

from . import crash_app as app

APP = Path(__file__).with_name("crash_app.py")
SEED = int(os.environ.get("WAYPOST_CRASH_SEED", "20240607"))  # kill points and signal timing
N_RUNS = 80
MIN_KILLS = 50  # the contract
TARGET_KILLS = 70  # what the loop aims for
MAX_ITERATIONS = 110
LOOP_BUDGET = 90.0  # seconds for the kill loop; the final, clean run comes after
# On a loaded machine the loop may go on past its budget, until the contract holds.
HARD_BUDGET = 420.0
ACTIVE_RUNS = 7  # keep about this many runs past their `go` and unfinished
MIN_ACTIVE = 4  # and at least this many as a subprocess starts
GO_BATCH = 3
LEASE = 1.0
MAX_SECONDS = 4.0  # a subprocess that is not killed stops after this long
# The hit counts to kill at, per point: wide enough to land in many different
# places, small enough that the kill comes while there is work in flight.
N_POOLS = {
    "commit:before": range(1, 71),
    "commit:after": range(1, 41),
    "activity:before": range(1, 21),
    "activity:after": range(1, 21),
    "timers:fired": range(1, 5),
}
ACTIVITY_STEPS = 10  # activities one run of crashy schedules
TRIGGERS = ("before-start", "engine-ready", "1-execution", "3-executions", "after-exit")


def run_id(i: int) -> str:
    return f"run-{i:02d}"


def group(i: int) -> str:
    """A: `early` sent at creation; B: never sent; C: sent at some moment after `go`."""
    return "ABC"[i % 3]


@dataclass
class Iteration:
    number: int
    point: str | None
    n: int
    trigger: str
    returncode: int
    stderr: Path
    stdout: str
    seconds: float

    @property
    def killed(self) -> bool:
        return self.returncode == -signal.SIGKILL

    def describe(self) -> str:
        return (
            f"iteration {self.number} (kill at {self.point} #{self.n}, signals {self.trigger}): "
            f"returncode {self.returncode}, {self.seconds:.1f}s, stderr {self.stderr}"
        )


class Harness:
    def __init__(self, tmp: Path, url: str) -> None:
        self.tmp = tmp
        self.db = url
        self.log = tmp / "executions.log"
        self.engine = wp.Engine(url, lease=LEASE, poll_interval=0.05)
        self.engine.register(*app.ITEMS)
        self.go_sent: dict[int, int] = {}  # run index -> the n of its go payload
        self.early_sent: set[int] = set()
        self.histories: dict[str, list[tuple[int, str]]] = {}
        self.iterations: list[Iteration] = []
        self.warnings = 0  # lines the engine logged at WARNING (allowed, reported)
        self.rng = random.Random(SEED)

    def close(self) -> None:
        self.engine.close()

    # -- the runs and their signals ---------------------------------------------
    def create_runs(self) -> None:
        for i in range(N_RUNS):
            self.engine.start(app.crashy, {"x": i}, run_id=run_id(i))
            if group(i) == "A":
                self.send_early(i)

    def send_early(self, i: int) -> None:
        self.early_sent.add(i)
        # A run that timed out waiting may have finished meanwhile: the signal is too late.
        with contextlib.suppress(wp.RunNotActive):
            self.engine.signal(run_id(i), "early", {"early": i})

    def send_go(self, i: int) -> None:
        n = 1000 + i
        self.engine.signal(run_id(i), "go", {"n": n})
        self.go_sent[i] = n

    def pick_signals(self, everything: bool = False) -> tuple[list[int], list[int], list[int]]:
        """The runs to send `go` to before the next subprocess starts and at the
        iteration's trigger, and the group C runs to send `early` to (at the trigger)."""
        waiting = [i for i in range(N_RUNS) if i not in self.go_sent]
        if everything:
            go_now, go = waiting, []
        else:
            statuses = {r.run_id: r.status for r in self.engine.list_runs(limit=N_RUNS + 10)}
            active = sum(1 for i in self.go_sent if not statuses[run_id(i)].finished)
            go = waiting[: max(0, min(GO_BATCH, ACTIVE_RUNS + GO_BATCH // 2 - active))]
            # Enough work before the start that the subprocess reaches its kill point.
            go_now, go = go[: max(0, MIN_ACTIVE - active)], go[max(0, MIN_ACTIVE - active) :]
        early = [
            i
            for i in self.go_sent
            if group(i) == "C"
            and i not in self.early_sent
            and (everything or self.rng.random() < 0.5)
        ]
        return go_now, go, early

    def send(self, go: list[int], early: list[int]) -> None:
        for i in early:
            self.send_early(i)
        for i in go:
            self.send_go(i)

    # -- the subprocess ---------------------------------------------------------
    def executions(self) -> list[dict[str, Any]]:
        """The logged executions (complete lines only: the app may be writing one now)."""
        return complete_lines(self.log)

    def run_app(
        self,
        point: str | None,
        n: int,
        trigger: str,
        go_now: list[int],
        go: list[int],
        early: list[int],
        max_seconds: float = MAX_SECONDS,
    ) -> Iteration:
        number = len(self.iterations)
        stderr_path = self.tmp / f"app-{number:03d}.stderr"
        ready = self.tmp / f"app-{number:03d}.ready"
        cmd = [
            sys.executable,
            str(APP),
            "--db",
            self.db,
            "--log",
            str(self.log),
            "--runs",
            str(N_RUNS),
            "--lease",
            str(LEASE),
            "--max-seconds",
            str(max_seconds),
            "--ready",
            str(ready),
        ]
        if point is not None:
            cmd += ["--point", point, "--n", str(n)]
        self.send(go_now, [])
        if trigger == "before-start":
            self.send(go, early)
        logged_before = len(self.executions())
        started = time.monotonic()
        with open(stderr_path, "w") as err:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True)
            try:
                if trigger != "before-start":
                    conditions: dict[str, Callable[[], bool]] = {
                        "engine-ready": ready.exists,
                        "1-execution": lambda: len(self.executions()) >= logged_before + 1,
                        "3-executions": lambda: len(self.executions()) >= logged_before + 3,
                        "after-exit": lambda: False,
                    }
                    _wait_for(conditions[trigger], proc, started + max_seconds + 30)
                    self.send(go, early)
                stdout, _ = proc.communicate(timeout=max_seconds + 30)
            except BaseException:
                proc.kill()
                proc.communicate()
                raise
        (self.tmp / f"app-{number:03d}.stdout").write_text(stdout)
        it = Iteration(
            number,
            point,
            n,
            trigger,
            proc.returncode,
            stderr_path,
            stdout,
            time.monotonic() - started,
        )
        self.iterations.append(it)
        assert proc.returncode in (-signal.SIGKILL, app.EXIT_ALL_DONE, app.EXIT_TIME_LIMIT), (
            it.describe() + "\n" + stderr_path.read_text()
        )
        lines = stderr_path.read_text().splitlines()
        self.warnings += sum(1 for line in lines if " WARNING " in line)
        problems = [
            line
            for line in lines
            if "Traceback" in line or " ERROR " in line or " CRITICAL " in line
        ]
        assert not problems, (
            f"the engine reported errors in {it.describe()}:\n{stderr_path.read_text()}"
        )
        return it

    # -- checks after each kill -------------------------------------------------
    def check_histories(self, after: str) -> None:
        for i in range(N_RUNS):
            rid = run_id(i)
            events = self.engine.history(rid)
            problems = verify_chain(events, run=("default", rid))
            assert problems == [], f"{rid} after {after}: {problems}"
            assert self.engine.verify(rid) == [], f"{rid} after {after}"
            now = [(ev.seq, ev.hash) for ev in events]
            before = self.histories.get(rid, [])
            assert now[: len(before)] == before, (
                f"the history of {rid} moved backwards after {after}: it had {len(before)} "
                f"events, now {len(now)}, first difference at "
                f"{next((k for k, (x, y) in enumerate(zip(before, now, strict=False)) if x != y), len(now))}"
            )
            self.histories[rid] = now


def _wait_for(condition: Callable[[], bool], proc: subprocess.Popen[str], deadline: float) -> None:
    """Poll until `condition()` holds or the process has ended (or the deadline passed)."""
    while time.monotonic() < deadline:
        if condition() or proc.poll() is not None:
            return
        time.sleep(0.005)
    raise AssertionError("the subprocess neither reached the condition nor ended in time")


def _choose_point(kills: Counter[str], rotation: int) -> str:
    """The fault point with the fewest kills so far (rotating among ties)."""
    points = app.POINTS[rotation % len(app.POINTS) :] + app.POINTS[: rotation % len(app.POINTS)]
    return min(points, key=lambda p: kills[p])


# -- the final checks -----------------------------------------------------------------------
def _check_results(h: Harness) -> Counter[str]:
    """Every run completed with its expected result; how the `early` waits ended."""
    how_early: Counter[str] = Counter()
    for i in range(N_RUNS):
        rid = run_id(i)
        info = h.engine.get(rid)
        events = h.engine.history(rid)
        assert info.status == wp.RunStatus.COMPLETED, (
            f"{rid} is {info.status.value} (waiting for {info.waiting_for}, error {info.error}); "
            f"history ends with {events[-5:]}"
        )
        expected_early, how = _early_outcome(events)
        how_early[how] += 1
        if group(i) == "A":
            assert expected_early == {"early": i}, (rid, events)
        if group(i) == "B":
            assert expected_early == "timeout", (rid, events)
        assert info.result == {
            "value": app.expected_value(i, h.go_sent[i]),
            "early": expected_early,
        }, rid
    return how_early


def _early_outcome(events: list[Event]) -> tuple[Any, str]:
    """What wait_signal("early", timeout) must have returned, judging by the history."""
    signals = [ev for ev in events if ev.type == "SignalReceived" and ev.data["name"] == "early"]
    timers = [
        ev
        for ev in events
        if ev.type == "TimerStarted" and ev.data["duration"] == app.EARLY_TIMEOUT
    ]
    if not timers:  # the signal was there before the wait began
        assert signals, "the run waited for `early` without a timeout timer nor a signal"
        return signals[0].data["payload"], "signal before the wait"
    step = timers[0].data["step"]
    fired = [ev.seq for ev in events if ev.type == "TimerFired" and ev.data["step"] == step]
    fired_seq = fired[0] if fired else float("inf")
    if signals and signals[0].seq < fired_seq:
        return signals[0].data["payload"], "signal during the wait"
    assert fired, "the timeout timer of wait_signal(early) neither fired nor lost to a signal"
    return "timeout", "timed out"


def _check_shape(rid: str, events: list[Event]) -> None:
    """One command per step, a timer fires once and not early, nothing but audit after the end."""
    commands = Counter(
        (ev.type, ev.data["step"])
        for ev in events
        if ev.type in ("ActivityScheduled", "TimerStarted", "TimerFired", "TimerCancelled")
    )
    twice = sorted(k for k, count in commands.items() if count > 1)
    assert not twice, f"{rid}: recorded more than once: {twice}"
    completed = [ev.data["step"] for ev in events if ev.type == "ActivityCompleted"]
    assert len(completed) == len(set(completed)), f"{rid}: a step completed twice: {completed}"
    started = {ev.data["step"]: ev for ev in events if ev.type == "TimerStarted"}
    for ev in events:
        if ev.type == "TimerFired":
            timer = started.get(ev.data["step"])
            assert timer is not None and timer.seq < ev.seq, f"{rid}: {ev} fired unstarted"
            assert ev.ts >= timer.data["fire_at"], f"{rid}: {ev} fired early"
    ends = [k for k, ev in enumerate(events) if ev.type in TERMINAL_EVENTS]
    assert len(ends) == 1 and events[ends[0]].type == "RunCompleted", f"{rid}: {events[-3:]}"
    after = [ev for ev in events[ends[0] + 1 :] if ev.type != "LateResultIgnored"]
    assert not after, f"{rid}: events after the run ended: {after}"


def _check_executions(h: Harness) -> Counter[str]:
    executions = h.executions()
    by_step: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for ex in executions:
        assert ex["marker"] == "start", ex
        by_step[(ex["run"], ex["step"])].append(ex)

    stats = Counter({"executions": len(executions)})
    for i in range(N_RUNS):
        rid = run_id(i)
        events = h.engine.history(rid)
        assert [ev.seq for ev in events] == list(range(1, len(events) + 1)), rid
        assert verify_chain(events, run=("default", rid)) == [], rid
        _check_shape(rid, events)
        scheduled = {ev.data["step"]: ev for ev in events if ev.type == "ActivityScheduled"}
        assert len(scheduled) == ACTIVITY_STEPS, f"{rid}: steps {sorted(scheduled)}"
        for step, sched in scheduled.items():
            stats["steps"] += 1
            where = f"{rid} step {step} ({sched.data['activity']})"
            logged = by_step.get((rid, step), [])
            attempts = [ex["attempt"] for ex in logged]
            dupes = sorted(a for a, k in Counter(attempts).items() if k > 1)
            assert not dupes, f"{where}: attempt(s) {dupes} were executed more than once"
            keys = {ex["key"] for ex in logged}
            assert keys == {sched.data["key"]}, f"{where}: idempotency keys {keys}"
            assert sched.data["key"] == idempotency_key("default", rid, step), where

            outcomes = [
                ev
                for ev in events
                if ev.type in ("ActivityCompleted", "ActivityFailed") and ev.data["step"] == step
            ]
            completed = [ev for ev in outcomes if ev.type == "ActivityCompleted"]
            assert len(completed) == 1, f"{where}: {len(completed)} ActivityCompleted events"
            final = completed[0].data["attempt"]
            after_commit = sorted(a for a in attempts if a > final)
            assert not after_commit, (
                f"{where}: attempt(s) {after_commit} executed after attempt {final}'s result "
                "was committed"
            )
            # Each attempt before the final one ended in exactly one ActivityFailed.
            failed = sorted(ev.data["attempt"] for ev in outcomes if ev.type == "ActivityFailed")
            assert failed == list(range(1, final)), f"{where}: failed attempts {failed}, {final}"
            assert all(ev.data["retrying"] for ev in outcomes if ev.type == "ActivityFailed"), (
                f"{where}: a failure ended the step: {outcomes}"
            )
            # An outcome comes from an execution, unless the attempt's worker died
            # (then the lease expiry records its timeout, executed or not).
            for ev in outcomes:
                lost = ev.type == "ActivityFailed" and ev.data["error"]["type"] == "ActivityTimeout"
                if not lost:
                    assert ev.data["attempt"] in attempts, (
                        f"{where}: {ev} has no execution in the log (logged attempts {attempts})"
                    )
            for ev in events:
                if (
                    ev.type == "LateResultIgnored"
                    and ev.data["step"] == step
                    and ev.data["outcome"] == "completed"
                ):
                    assert ev.data["attempt"] in attempts, f"{where}: {ev} was never executed"
            if sched.data["activity"] == "flaky" and 1 in attempts:
                assert failed and failed[0] == 1, where
            if len(logged) > 1:
                stats["re-executed steps"] += 1
            stats["attempts lost with their worker"] += sum(
                1
                for ev in outcomes
                if ev.type == "ActivityFailed" and ev.data["error"]["type"] == "ActivityTimeout"
            )
        stats["late results ignored"] += sum(1 for ev in events if ev.type == "LateResultIgnored")
    unknown = set(by_step) - {
        (run_id(i), ev.data["step"])
        for i in range(N_RUNS)
        for ev in h.engine.history(run_id(i))
        if ev.type == "ActivityScheduled"
    }
    assert not unknown, f"executions of steps no history schedules: {sorted(unknown)}"
    return stats


@pytest.mark.slow
@pytest.mark.timeout(HARD_BUDGET + 180)
@pytest.mark.parametrize(("store", "target_kills"), [("sqlite", TARGET_KILLS), ("postgres", 60)])
def test_sigkill_at_many_points_loses_nothing_and_repeats_no_committed_step(
    tmp_path: Path, request: pytest.FixtureRequest, store: str, target_kills: int
) -> None:
    started = time.monotonic()
    url = (
        f"sqlite:///{tmp_path / 'crash.db'}"
        if store == "sqlite"
        else request.getfixturevalue("fresh_postgres")
    )
    h = Harness(tmp_path, url)
    try:
        h.create_runs()
        h.check_histories("creating the runs")
        kills: Counter[str] = Counter()
        kill_points: set[tuple[str, int]] = set()
        pools = {p: h.rng.sample(list(r), len(r)) for p, r in N_POOLS.items()}
        rotation = 0

        def keep_killing() -> bool:
            if sum(kills.values()) >= target_kills or len(h.iterations) >= MAX_ITERATIONS:
                return False
            elapsed = time.monotonic() - started
            if elapsed < LOOP_BUDGET:
                return True
            return len(kill_points) < MIN_KILLS and elapsed < HARD_BUDGET

        while keep_killing():
            point = _choose_point(kills, rotation)
            rotation += 1
            pool = pools[point]
            n = pool.pop()
            pool.insert(0, n)  # used again only once the others have been
            go_now, go, early = h.pick_signals()
            trigger = TRIGGERS[len(h.iterations) % len(TRIGGERS)]
            it = h.run_app(point, n, trigger, go_now, go, early)
            h.check_histories(it.describe())
            if it.killed:
                kills[point] += 1
                kill_points.add((point, n))
            if it.returncode == app.EXIT_ALL_DONE:
                break  # nothing left to kill: every run finished
        loop_seconds = time.monotonic() - started

        go_now, go, early = h.pick_signals(everything=True)
        final = h.run_app(None, 0, "before-start", go_now, go, early, max_seconds=90)
        h.check_histories("the final run")
        assert final.returncode == app.EXIT_ALL_DONE, final.describe()

        how_early = _check_results(h)
        stats = _check_executions(h)
    finally:
        h.close()

    total = sum(kills.values())
    summary = (
        f"seed {SEED}: {len(h.iterations)} subprocesses, {total} SIGKILLs at {len(kill_points)} distinct "
        f"(point, n): {dict(kills)}; kill loop {loop_seconds:.0f}s, "
        f"total {time.monotonic() - started:.0f}s; {dict(stats)}; early: {dict(how_early)}; "
        f"{h.warnings} warnings logged"
    )
    print(summary)
    for it in h.iterations:
        if not it.killed:
            print(it.describe(), it.stdout.strip()[:2000])
    assert total >= MIN_KILLS, summary
    assert len(kill_points) >= MIN_KILLS, summary
    assert all(kills[p] >= 5 for p in app.POINTS), summary
