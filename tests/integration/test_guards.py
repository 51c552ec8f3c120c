"""Tests that guard guarantees a planted bug once slipped past (both stores):
a pinned definition replaced in place, idempotency keys unique per step and run, and a
stale attempt reporting while the new attempt still holds the lease."""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta
from typing import Any

import pytest

import waypost as wp
from tests.helpers import db_write, eventually, of_type, until_event
from waypost.model.definitions import parse_definition
from waypost.model.events import canonical_json

pytestmark = pytest.mark.timeout(120)

WAITING = """
name: pinned
start: hold
steps:
  hold: {type: wait, signal: go, next: done}
  done: {type: succeed, output: "'version one'"}
"""


def test_a_pinned_version_replaced_in_place_suspends_its_runs(
    make_engine: Any, db_url: str
) -> None:
    """Someone rewrites version 1 in the database, body and digest together: runs pinned
    to it suspend instead of running the new body."""
    first = make_engine()
    first.publish(WAITING)
    with first.running():
        run = first.start("pinned", {})
        eventually(lambda: first.get(run.run_id).status == "waiting", "the run to wait")
    first.close()
    forged = parse_definition(WAITING.replace("'version one'", "'forged'"))
    db_write(
        db_url,
        "UPDATE definitions SET body = ?, digest = ? WHERE name = ? AND version = 1",
        (canonical_json(forged.data), forged.digest, "pinned"),
    )
    second = make_engine()
    with second.running():
        second.signal(run.run_id, "go")
        info = eventually(
            lambda: (i := second.get(run.run_id)).status == "suspended" and i, "suspension"
        )
    assert info.error is not None and "pinned to" in info.error["message"]
    assert of_type(second.history(run.run_id), "RunCompleted") == []


keys: dict[str, list[tuple[int, str]]] = {}
_keys_lock = threading.Lock()


@wp.activity(retry=wp.Retry(max_attempts=3, initial_interval=timedelta(0)))
def keyed_step(ctx: wp.ActivityContext, name: str) -> str:
    with _keys_lock:
        keys.setdefault(f"{ctx.run_id}/{name}", []).append((ctx.attempt, ctx.idempotency_key))
    if name == "flaky" and ctx.attempt < 3:
        raise RuntimeError("try again")
    return name


@wp.workflow(name="three_keys")
async def three_keys(ctx: wp.WorkflowContext) -> list[str]:
    a, b = await asyncio.gather(ctx.run(keyed_step, "a"), ctx.run(keyed_step, "flaky"))
    return [a, b, await ctx.run(keyed_step, "a")]


def test_idempotency_keys_are_one_per_step_and_unique_across_steps_runs_and_tenants(
    make_engine: Any,
) -> None:
    keys.clear()
    engine = make_engine(three_keys, keyed_step)
    with engine.running():
        runs = [
            engine.start(three_keys, tenant=tenant, run_id="same-id")
            for tenant in ("acme", "globex")
        ]
        runs.append(engine.start(three_keys, tenant="acme"))
        for run in runs:
            assert run.result(timeout=20) == ["a", "flaky", "a"]
    seen: dict[str, str] = {}
    for run in runs:
        scheduled = of_type(engine.history(run.run_id, tenant=run.tenant), "ActivityScheduled")
        assert len({e.data["key"] for e in scheduled}) == 3  # the same activity twice: 2 keys
        for e in scheduled:
            assert e.data["key"] not in seen, (e.data["key"], seen[e.data["key"]])
            seen[e.data["key"]] = f"{run.tenant}/{run.run_id}/{e.data['step']}"
    # Every attempt of a step carries the step's key (the flaky step ran 3 times).
    flaky = [k for name, got in keys.items() if name.endswith("/flaky") for k in got]
    assert len(flaky) == 9 and len({key for _, key in flaky}) == 3


first_running = threading.Event()
let_first_return = threading.Event()
second_holding = threading.Event()
let_second_finish = threading.Event()


@wp.activity(
    timeout=timedelta(seconds=60),
    heartbeat_timeout=timedelta(seconds=1),
    retry=wp.Retry(initial_interval=timedelta(0)),
)
def contested(ctx: wp.ActivityContext) -> str:
    if ctx.attempt == 1:
        first_running.set()
        let_first_return.wait(30)  # silent past its heartbeat timeout: the step is retried
        return "first"
    second_holding.set()
    while not let_second_finish.wait(0.2):
        ctx.heartbeat()  # attempt 2 keeps its lease
    return "second"


@wp.workflow(name="contested")
async def contested_flow(ctx: wp.WorkflowContext) -> str:
    return str(await ctx.run(contested))


def test_a_stale_attempt_reporting_while_the_new_one_holds_the_lease_changes_nothing(
    make_engine: Any,
) -> None:
    """Attempt 1 goes silent and is timed out; attempt 2 runs and holds the lease; then
    attempt 1 returns a result: it is recorded as ignored, and the run takes attempt 2's."""
    for event in (first_running, let_first_return, second_holding, let_second_finish):
        event.clear()
    engine = make_engine(contested_flow, contested)
    with engine.running():
        run = engine.start(contested_flow)
        assert first_running.wait(10)
        assert second_holding.wait(20)  # attempt 2 holds the lease now
        let_first_return.set()  # attempt 1's thread returns and reports
        late = until_event(engine, run.run_id, "LateResultIgnored", "the late report")
        assert late[0].data["attempt"] == 1 and late[0].data["result"] == "first"
        let_second_finish.set()
        assert engine.result(run.run_id, timeout=20) == "second"
    history = engine.history(run.run_id)
    completed = of_type(history, "ActivityCompleted")
    assert [e.data["attempt"] for e in completed] == [2]
    assert late[0].seq < completed[0].seq  # it reported while attempt 2 was running
