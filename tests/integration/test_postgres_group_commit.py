"""Group commit on PostgreSQL: the commits of many runs in one transaction, each caller
answered as if its commit had been made alone (waypost.store.postgres_group).

A group is made deterministic by holding the row of the first run with another
connection: its commit is then the one group in flight (the store has one committer
here), and the commits made meanwhile queue up and go as the next group.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

import waypost as wp
from tests.helpers.flows import sum_of_steps
from tests.helpers.store_calls import signal_commit
from waypost.errors import ConfigurationError, StoreError
from waypost.model.chain import verify_chain
from waypost.model.events import EventType, NewEvent
from waypost.store.base import (
    ActivityTaskOp,
    Conflict,
    NewActivityTask,
    NewRun,
    RunCommit,
    WorkflowTaskOp,
)
from waypost.store.effects import ScheduleActivities, SettleActivity
from waypost.store.postgres import PostgresStore

E = EventType
T0 = 1_700_000_000.0
TENANT = "default"
N = 20


def new_run(run_id: str) -> NewRun:
    return NewRun(
        tenant=TENANT,
        run_id=run_id,
        workflow="wf",
        version="1",
        input={"run": run_id},
        ts=T0,
        started=NewEvent(E.RUN_STARTED, {"workflow": "wf", "version": "1"}, T0),
        claim_owner="w1",
        lease=30.0,
    )


async def _until(predicate: Callable[[], bool]) -> None:
    for _ in range(5000):
        if predicate():
            return
        await asyncio.sleep(0.001)
    raise AssertionError("condition not reached in time")


async def grouped(
    url: str, odd_one: Callable[[PostgresStore], Any], *, group_lands: bool = True
) -> dict[str, Any]:
    """Commit a signal to each of N runs and `odd_one(store)`'s commit, all but the
    first run's queued behind it so that they go as one group; what each got back.
    With `group_lands=False`, the group's COMMIT is expected to fail as a whole."""
    store = PostgresStore(url)
    store.commit_threads = 1
    await store.open()
    try:
        heads = {}
        for i in range(N):
            created = await store.create_run(new_run(f"r{i}"))
            heads[f"r{i}"] = (created.run.last_seq, created.run.last_hash)
        odd = await odd_one(store)
        groups = store._groups
        assert groups is not None

        def signal(run_id: str) -> RunCommit:
            return signal_commit(run_id, heads[run_id])

        before = dict(store.stats)
        with psycopg.connect(url, options="-c search_path=waypost") as holder:
            holder.execute("SELECT 1 FROM runs WHERE run_id = 'r0' FOR UPDATE")
            plug = asyncio.ensure_future(store.commit_run(signal("r0")))
            await _until(lambda: groups.busy == 1 and groups.queued == 0)
            rest = [signal(f"r{i}") for i in range(1, N)]
            rest.insert(N // 2, odd)
            futures = [asyncio.ensure_future(store.commit_run(c)) for c in rest]
            await _until(lambda: groups.queued == len(rest))
            holder.rollback()  # lets the plug through; the rest follow as one group
        outcomes = await asyncio.gather(plug, *futures, return_exceptions=True)
        after = store.stats
        answers: dict[str, Any] = dict(
            zip(["r0", *(c.run_id for c in rest)], outcomes, strict=True)
        )
        for i in range(N):
            history = await store.load_history(TENANT, f"r{i}")
            assert verify_chain(history, run=(TENANT, f"r{i}")) == []
            if group_lands or i == 0:  # the plug commits alone, before the group
                assert answers[f"r{i}"].ok, answers[f"r{i}"]
                assert [e.type for e in history] == [E.RUN_STARTED, E.SIGNAL_RECEIVED]
            else:  # failed with the group's COMMIT, and not run again
                assert isinstance(answers[f"r{i}"], StoreError), answers[f"r{i}"]
                assert [e.type for e in history] == [E.RUN_STARTED]
        answers["commits"] = after["commits"] - before["commits"]
        answers["requests"] = after["requests"] - before["requests"]
        answers["redone"] = after["groups_redone"] - before["groups_redone"]
        answers["state of odd"] = await store.load_run(TENANT, odd.run_id)
        answers["tasks of odd"] = await store.run_tasks(TENANT, odd.run_id)
        return answers
    finally:
        await store.close()


def test_commits_queued_together_land_in_one_transaction_and_a_conflict_answers_alone(
    fresh_postgres: str,
) -> None:
    async def stale(store: PostgresStore) -> RunCommit:
        await store.create_run(new_run("stale"))
        signal = NewEvent(E.SIGNAL_RECEIVED, {"name": "stale"}, T0 + 1)
        return RunCommit(TENANT, "stale", [signal], T0 + 1, expect_seq=7, expect_hash="x")

    answers = asyncio.run(grouped(fresh_postgres, stale))
    assert answers["stale"].conflict is Conflict.SEQ
    assert answers["state of odd"][0].last_seq == 1
    # The plug alone, then the other N - 1 commits and the stale one in one transaction.
    assert (answers["commits"], answers["requests"], answers["redone"]) == (2, N + 1, 0)


def test_a_commit_that_fails_after_writing_rolls_the_group_back_and_each_runs_alone(
    fresh_postgres: str,
) -> None:
    async def doomed(store: PostgresStore) -> RunCommit:
        # Deletes its finished activity task, then fails on the workflow fence: what it
        # deleted must come back, and the group's other commits must land.
        await store.create_run(new_run("a"))
        task = NewActivityTask(
            "1", "act", {"activity": "act", "step": "1"}, timeout=60.0, heartbeat_timeout=None
        )
        scheduled = NewEvent(E.ACTIVITY_SCHEDULED, {"step": "1", "activity": "act"}, T0)
        assert (
            await store.commit_run(
                RunCommit(TENANT, "a", [scheduled], T0, effects=(ScheduleActivities([task]),))
            )
        ).ok
        (claimed,) = await store.claim_tasks("w2", [], ["act"], 0, 1, 30.0, T0)
        done = NewEvent(E.ACTIVITY_COMPLETED, {"step": "1", "result": 1}, T0 + 1)
        return RunCommit(
            TENANT,
            "a",
            [done],
            T0 + 1,
            effects=(SettleActivity("1", claimed.fence, ActivityTaskOp.DONE),),
            workflow_fence=99,
            workflow_op=WorkflowTaskOp.IDLE,
        )

    answers = asyncio.run(grouped(fresh_postgres, doomed))
    assert answers["a"].conflict is Conflict.WORKFLOW_FENCE
    assert answers["state of odd"][0].last_seq == 2  # the completion was not appended
    assert [t.kind for t in answers["tasks of odd"]].count("activity") == 1  # nor its task gone
    assert answers["redone"] == 1
    # The plug, the rolled-back group (not counted), then each of the N commits alone.
    assert (answers["commits"], answers["requests"]) == (N + 1, N + 1)


def test_a_commit_that_raises_gets_its_error_and_the_rest_of_its_group_lands(
    fresh_postgres: str,
) -> None:
    async def broken(store: PostgresStore) -> RunCommit:
        await store.create_run(new_run("broken"))
        # Data the events' JSON cannot hold: the commit raises inside the transaction.
        bad = NewEvent(E.SIGNAL_RECEIVED, {"name": {1, 2}}, T0 + 1)
        return RunCommit(TENANT, "broken", [bad], T0 + 1)

    answers = asyncio.run(grouped(fresh_postgres, broken))
    assert isinstance(answers["broken"], TypeError)
    assert answers["state of odd"][0].last_seq == 1
    assert answers["redone"] == 1


def test_a_group_whose_commit_fails_fails_each_of_its_commits_and_runs_none_again(
    fresh_postgres: str,
) -> None:
    # A constraint checked at COMMIT refuses one event: the whole group's COMMIT fails.
    # Whether a failed COMMIT landed is unknown to the client, so nothing is run again.
    with psycopg.connect(fresh_postgres, autocommit=True) as admin:
        admin.execute(
            """
            CREATE FUNCTION waypost.refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF NEW.data LIKE '%poison%' THEN RAISE EXCEPTION 'poison'; END IF;
                RETURN NULL;
            END $$;
            CREATE CONSTRAINT TRIGGER refuse_poison AFTER INSERT ON waypost.events
                DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
                EXECUTE FUNCTION waypost.refuse_poison();
            """
        )

    async def poisoned(store: PostgresStore) -> RunCommit:
        created = await store.create_run(new_run("poisoned"))
        bad = NewEvent(E.SIGNAL_RECEIVED, {"name": "poison"}, T0 + 1)
        return RunCommit(
            TENANT,
            "poisoned",
            [bad],
            T0 + 1,
            expect_seq=created.run.last_seq,
            expect_hash=created.run.last_hash,
        )

    answers = asyncio.run(grouped(fresh_postgres, poisoned, group_lands=False))
    assert isinstance(answers["poisoned"], StoreError)
    assert "poison" in str(answers["poisoned"])
    assert answers["state of odd"][0].last_seq == 1
    # The plug, then the group (rolled back by its COMMIT, so not counted); none redone.
    assert (answers["commits"], answers["redone"]) == (1, 0)


@wp.activity
async def noop(ctx: wp.ActivityContext, i: int) -> int:
    return i


@wp.workflow(name="grouped_steps")
async def steps(ctx: wp.WorkflowContext, n: int) -> int:
    return await sum_of_steps(ctx, noop, n)


@pytest.mark.parametrize("group_commit", ["on", "off"])
def test_an_engine_runs_many_runs_at_once_with_and_without_group_commit(
    fresh_postgres: str, group_commit: str
) -> None:
    engine = wp.Engine(f"{fresh_postgres}?group_commit={group_commit}", poll_interval=0.05)
    engine.register(steps, noop)
    try:
        with engine.running():
            before = dict(engine.stats()["store"])
            runs = [engine.start(steps, 5) for _ in range(40)]
            for run in runs:
                assert engine.result(run.run_id, timeout=60) == 10
            stats = engine.stats()["store"]
        commits = stats["commits"] - before["commits"]
        requests = stats["requests"] - before["requests"]
        assert requests >= 40 * 6  # a commit for each step and the end, at least
        if group_commit == "on":
            assert commits < requests
        else:
            assert commits == requests
    finally:
        engine.close()


def test_group_commit_is_on_or_off() -> None:
    with pytest.raises(ConfigurationError, match="group_commit='maybe'"):
        PostgresStore("postgresql://postgres@127.0.0.1/x?group_commit=maybe")
    assert PostgresStore("postgresql://postgres@127.0.0.1/x").group_commit is True
    assert PostgresStore("postgresql://postgres@127.0.0.1/x?group_commit=off").group_commit is False


def test_a_commit_of_many_events_inserts_them_all_in_order(fresh_postgres: str) -> None:
    # A step's events go as one INSERT of many rows, in statements of at most 500 rows.
    async def body() -> list[Any]:
        store = PostgresStore(fresh_postgres)
        await store.open()
        try:
            created = await store.create_run(new_run("many"))
            signals = [NewEvent(E.SIGNAL_RECEIVED, {"name": f"s{i}"}, T0 + 1) for i in range(1201)]
            res = await store.commit_run(
                RunCommit(
                    TENANT,
                    "many",
                    signals,
                    T0 + 1,
                    expect_seq=created.run.last_seq,
                    expect_hash=created.run.last_hash,
                )
            )
            assert res.ok, res
            return await store.load_history(TENANT, "many")
        finally:
            await store.close()

    history = asyncio.run(body())
    assert [e.seq for e in history] == list(range(1, 1203))
    assert [e.data["name"] for e in history[1:]] == [f"s{i}" for i in range(1201)]
    assert verify_chain(history, run=(TENANT, "many")) == []
