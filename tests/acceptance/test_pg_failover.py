"""The primary PostgreSQL server dies, or is switched over, while runs are in flight:
the engine, given both servers in its URL, goes on with the new primary by itself;
nothing committed is lost, no step's result is applied twice, and every run completes.

The servers are a pg_auto_failover formation of the test's own (a monitor and two
PostgreSQL 15 nodes in synchronous replication, `tests/helpers/pgfailover.py`), never
the shared server at 5432. Each test prints what it measured: how long until the other
node was promoted and took writes, how long until steps moved again, and how many steps
ran more than once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

import waypost as wp
from tests.helpers import db_query, eventually, of_type
from tests.helpers.executions import ExecutionLog, check_nothing_lost_or_doubled
from tests.helpers.flows import sum_of_steps
from tests.helpers.pgfailover import Formation, Node, available, formation

pytestmark = [
    pytest.mark.slow,
    pytest.mark.serial,
    pytest.mark.timeout(240),
    pytest.mark.skipif(
        not available(),
        reason="pg_autoctl is missing: apt-get install pg-auto-failover-cli "
        "postgresql-15-auto-failover (.ci/run does)",
    ),
]

STEPS = 10
RUNS = 20
MOVE_WITHIN = 15.0  # seconds from the new primary taking writes to the next step
EXECUTIONS = ExecutionLog()


@wp.activity(retry=wp.Retry(max_attempts=20))
def work(ctx: wp.ActivityContext, i: int) -> int:
    EXECUTIONS.record(ctx)
    time.sleep(0.05)
    return i


@wp.workflow(name="failover")
async def failover_flow(ctx: wp.WorkflowContext, n: int) -> int:
    return await sum_of_steps(ctx, work, STEPS) + n


@dataclass
class Measured:
    promoted: float  # seconds from the disruption until the other node left recovery
    writable: float  # ... until it took writes
    moved: float  # seconds from then until the next step committed on it
    repeats: int  # executions of steps beyond one each
    lapses: list[str]  # attempts whose lease lapsed, and why (run/step: reason)

    def __str__(self) -> str:
        return (
            f"promoted after {self.promoted:.1f} s, took writes after {self.writable:.1f} s, "
            f"steps moved {self.moved:.1f} s later; {len(self.lapses)} attempts lapsed, "
            f"{self.repeats} steps ran again"
        )


def _completed(url: str) -> int:
    rows = db_query(url, "SELECT count(*) FROM events WHERE type = 'ActivityCompleted'")
    return int(rows[0][0])


def _until_writable(node: Node, failed: list[BaseException]) -> tuple[float, float]:
    """Poll `node` until it takes writes: (when it was promoted, when it took writes).
    A disruption that failed (`failed`) is raised at once, not waited out."""
    promoted: list[float] = []

    def takes_writes() -> bool:
        if failed:
            raise failed[0]
        out_of_recovery, writable = node.writable()
        if out_of_recovery and not promoted:
            promoted.append(time.monotonic())
        return writable

    eventually(takes_writes, f"{node.name} to take writes", timeout=60, interval=0.05)
    return promoted[0], time.monotonic()


def _story(history: list[wp.Event], failed: wp.Event) -> str:
    """The events of the failed attempt's step, with their attempts."""
    step = failed.data["step"]
    return ", ".join(
        f"{e.type}({e.data.get('attempt', '')})" for e in history if e.data.get("step") == step
    )


def run_through(
    servers: Formation, tmp_path: Path, disrupt: Callable[[Formation, Node], None]
) -> tuple[dict[str, list[wp.Event]], dict[str, list[wp.Event]], Measured]:
    """Start the runs, `disrupt` the primary once a third of the steps are done, and
    let them finish: the histories before and after, and what was measured."""
    EXECUTIONS.use(tmp_path / "executions.jsonl")
    old = servers.primary()
    new = servers.other(old)
    engine = wp.Engine(servers.url, lease=2, poll_interval=0.2)
    try:
        engine.register(failover_flow, work)
        with engine.running():
            handles = [engine.start(failover_flow, n, run_id=f"r{n}") for n in range(RUNS)]
            eventually(
                lambda: _completed(servers.url) >= RUNS * STEPS // 3,
                "a third of the steps to complete",
                timeout=60,
                interval=0.05,
            )
            before = {h.run_id: engine.history(h.run_id) for h in handles}
            started, wall = time.monotonic(), time.time()
            failed: list[BaseException] = []

            def disrupting() -> None:
                try:
                    disrupt(servers, old)
                except BaseException as exc:
                    failed.append(exc)

            disruption = threading.Thread(target=disrupting)
            disruption.start()
            promoted, writable = _until_writable(new, failed)
            done = _completed(new.url)
            eventually(
                lambda: _completed(new.url) > done,
                "a step to commit on the new primary",
                timeout=MOVE_WITHIN + 15,
                interval=0.05,
            )
            moved = time.monotonic()
            results = [h.result(timeout=90) for h in handles]
            after = {h.run_id: engine.history(h.run_id) for h in handles}
            disruption.join(120)
    finally:
        engine.close()
    if failed:
        raise failed[0]
    assert results == [sum(range(STEPS)) + n for n in range(RUNS)]
    executions = EXECUTIONS.read()
    measured = Measured(
        promoted=promoted - started,
        writable=writable - started,
        moved=moved - writable,
        repeats=len(executions) - len({(x["run"], x["step"]) for x in executions}),
        lapses=[
            f"{run_id}/{e.data['step']}: {e.data['error']['message']}; {_story(history, e)}"
            for run_id, history in after.items()
            for e in of_type(history, "ActivityFailed")
        ],
    )
    print(f"\n{disrupt.__name__}: {measured}", *measured.lapses, *servers.timeline(wall), sep="\n")
    return before, after, measured


def check_retries_followed_lapses(after: dict[str, list[wp.Event]], measured: Measured) -> None:
    """A step ran again only once its earlier attempt's lease or deadline had expired
    (the history says so of each earlier attempt). Activities run at least once, and a
    failover can make one run twice: a claim asked for during the outage lands after it
    with the lease it was given then, already past, and lapses at once."""
    executions = EXECUTIONS.read()
    for run_id, history in after.items():
        lapsed = {
            (e.data["step"], e.data["attempt"])
            for e in of_type(history, "ActivityFailed")
            if (e.data.get("error") or {}).get("type") == "ActivityTimeout"
        }
        for step in {e.data["step"] for e in of_type(history, "ActivityCompleted")}:
            ran = sorted(
                x["attempt"] for x in executions if (x["run"], x["step"]) == (run_id, step)
            )
            assert {(step, a) for a in ran[:-1]} <= lapsed, (
                f"{run_id}/{step} ran as attempts {ran} with no lapse before a retry ({measured})"
            )


def survives(
    tmp_path: Path, disrupt: Callable[[Formation, Node], None]
) -> dict[str, tuple[str, str]]:
    """Runs through `disrupt` of the primary of a formation of their own: checked, and
    the nodes' states at the end."""
    with formation() as servers:
        try:
            before, after, measured = run_through(servers, tmp_path, disrupt)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{servers.logs()}") from None
        states = servers.states()
    check_nothing_lost_or_doubled(before, after, EXECUTIONS.read(), STEPS, f"({measured})")
    check_retries_followed_lapses(after, measured)
    assert measured.moved < MOVE_WITHIN, (
        f"steps moved again only {measured.moved:.1f} s after the new primary took writes "
        f"({measured})"
    )
    return states


def kill(servers: Formation, primary: Node) -> None:
    servers.kill(primary)


def switch_over(servers: Formation, primary: Node) -> None:
    servers.switchover()
    servers.wait_until_replicating(timeout=60)  # the old primary follows the new one


def test_the_primary_killed_mid_run_loses_nothing_and_every_run_completes(
    tmp_path: Path,
) -> None:
    states = survives(tmp_path, kill)
    # The standby took over, alone (its synchronous replication off until a standby comes).
    assert states["node2"] == ("wait_primary", "wait_primary"), states


def test_a_switchover_mid_run_loses_nothing_and_every_run_completes(tmp_path: Path) -> None:
    states = survives(tmp_path, switch_over)
    assert states == {"node1": ("secondary", "secondary"), "node2": ("primary", "primary")}
