"""A run's step in one statement on PostgreSQL (waypost.store.transactions.step).

The same commits are made on two schemas of one database, one with the step statement
and one without (`?step_statement=off`, the long way of five statements): every row
of every table must come out the same, and a commit whose condition fails must write
nothing and get the conflict the long way names.
"""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

from waypost.errors import ConfigurationError
from waypost.model.chain import verify_chain
from waypost.model.events import EventType, NewEvent
from waypost.store.base import (
    ActivityTaskOp,
    CommitResult,
    Conflict,
    NewActivityTask,
    NewRun,
    NewTimer,
    RunCommit,
    Snapshot,
    WorkflowTaskOp,
)
from waypost.store.effects import (
    CancelTimers,
    Effect,
    OpenCorrelations,
    ScheduleActivities,
    SettleActivity,
    StartTimers,
)
from waypost.store.postgres import PostgresStore, PostgresTx, parse_postgres_url
from waypost.store.rows import NewCorrelation

E = EventType
TENANT = "default"
# Times with every bit of a double in use: they must come back exactly (the chain hashes them).
T0 = 1_700_000_000.123456789
DONE = ActivityTaskOp.DONE
TABLES = ("runs", "tasks", "events", "timers", "queues", "correlations", "approvals")


def task(step: str, queue: str = "default", owner: str | None = "w1") -> NewActivityTask:
    spec = {"activity": "act", "step": step, "args": [step, 'ünï\\"code\u2028']}
    if queue != "default":
        spec["queue"] = queue
    return NewActivityTask(
        step, "act", spec, timeout=61.7, heartbeat_timeout=9.3, owner=owner, lease=29.9
    )


class Driver:
    """Commits a run's steps one by one, as an engine that holds its workflow task would."""

    def __init__(self, store: PostgresStore, run_id: str) -> None:
        self.store, self.run_id = store, run_id
        self.seq, self.hash = 0, ""
        self.n = 0

    async def start(self) -> None:
        started = NewEvent(E.RUN_STARTED, {"workflow": "wf", "version": "1"}, T0)
        created = await self.store.create_run(
            NewRun(
                tenant=TENANT,
                run_id=self.run_id,
                workflow="wf",
                version="1",
                input={"x": 1},
                ts=T0,
                started=started,
                claim_owner="w1",
                lease=30.0,
            )
        )
        assert created.workflow_fence == 1
        self.seq, self.hash = created.run.last_seq, created.run.last_hash
        # The first decision: schedule step 1, leased at once; the workflow task idles.
        first = await self.commit(
            [NewEvent(E.ACTIVITY_SCHEDULED, {"step": "1"}, T0 + 0.1)], [task("1")], None
        )
        assert first.ok, first

    async def commit(
        self,
        events: list[NewEvent],
        new: list[NewActivityTask],
        done: str | None,
        *,
        fence: int = 1,
        wf_fence: int = 1,
        stale: bool = False,
    ) -> CommitResult:
        """A step: `done`'s result recorded, the attempts `new` leased at once."""
        effects: list[Effect] = [] if done is None else [SettleActivity(done, fence, DONE)]
        if new:
            effects.append(ScheduleActivities(new))
        return await self.raw(
            events,
            Snapshot("running", [{"step": s.step} for s in new], self.seq),
            *effects,
            expect_seq=self.seq - (1 if stale else 0),
            workflow_fence=wf_fence,
        )

    async def reload(self) -> None:
        run, _ = await self.store.load_run(TENANT, self.run_id)
        assert run is not None
        self.seq, self.hash = run.last_seq, run.last_hash

    async def raw(
        self, events: list[NewEvent], snapshot: Snapshot, *effects: Effect, **kw: Any
    ) -> CommitResult:
        """A commit after the run's head, by the holder of its workflow task."""
        self.n += 1
        fields: dict[str, Any] = {
            "expect_seq": self.seq,
            "expect_hash": self.hash,
            "workflow_fence": 1,
            "workflow_op": WorkflowTaskOp.DELETE if snapshot.finished else WorkflowTaskOp.IDLE,
            **kw,
        }
        result = await self.store.commit_run(
            RunCommit(
                TENANT,
                self.run_id,
                events,
                T0 + self.n * 0.731,
                snapshot=snapshot,
                effects=effects,
                **fields,
            )
        )
        if result.ok:
            self.seq, self.hash = result.last_seq, result.last_hash
        return result

    async def finish(self, done: str | None, *effects: Effect) -> CommitResult:
        now = T0 + (self.n + 1) * 0.731
        events = [] if done is None else [NewEvent(E.ACTIVITY_COMPLETED, {"step": done}, now)]
        events.append(NewEvent(E.RUN_COMPLETED, {"result": {"done": self.run_id}}, now))
        settled = () if done is None else (SettleActivity(done, 1, DONE),)
        ended = Snapshot("completed", [], self.seq, result={"done": self.run_id}, finished=True)
        return await self.raw(events, ended, *settled, *effects)

    async def step(self, done: str, nxt: list[str], **kw: Any) -> CommitResult:
        now = T0 + (self.n + 1) * 0.731
        events = [NewEvent(E.ACTIVITY_COMPLETED, {"step": done, "result": [done, "é"]}, now)]
        events += [NewEvent(E.ACTIVITY_SCHEDULED, {"step": s}, now) for s in nxt]
        return await self.commit(events, [task(s) for s in nxt], done, **kw)


def rows(url: str, schema: str) -> dict[str, list[tuple[Any, ...]]]:
    with psycopg.connect(url) as conn:
        return {
            table: conn.execute(f"SELECT * FROM {schema}.{table} ORDER BY 1, 2, 3, 4").fetchall()
            for table in TABLES
        }


async def scripted(url: str) -> dict[str, int]:
    """Steps of one shape (one next step, two at once, none), then a few of other shapes."""
    store = PostgresStore(url)
    await store.open()
    try:
        run = Driver(store, "r1")
        await run.start()
        assert (await run.step("1", ["2"])).ok
        assert (await run.step("2", ["3a", "3b"])).ok  # a fan-out: two attempts leased
        assert (await run.step("3a", [])).ok  # nothing new: waits for 3b
        assert (await run.step("3b", ["4"])).ok
        # A step whose workflow task is not idle (woken by a signal): written the long way.
        other = Driver(store, "r2")
        await other.start()
        await store.commit_run(
            RunCommit(
                TENANT,
                "r2",
                [NewEvent(E.SIGNAL_RECEIVED, {"name": "go"}, T0 + 3)],
                T0 + 3,
                workflow_op=WorkflowTaskOp.WAKE,
            )
        )
        heads = await store.load_run(TENANT, "r2")
        assert heads[0] is not None
        other.seq, other.hash = heads[0].last_seq, heads[0].last_hash
        assert (await other.step("1", ["2"])).ok
        # r1 sets a timer and a signal wait (the long way), then ends cancelling the timer:
        # the end in one statement removes its tasks, timers and waits.
        await run.raw(
            [NewEvent(E.TIMER_STARTED, {"step": "t", "fire_at": T0 + 99}, T0 + 4)],
            Snapshot("waiting", [], run.seq),
            StartTimers([NewTimer("t", T0 + 99)]),
            OpenCorrelations([NewCorrelation("w", "go", "order", "42")]),
        )
        assert (await run.finish("4", CancelTimers(["t"]))).ok
        # A child of r2 (left alone if r2 ends first): its end tells r2, the long way.
        child = Driver(store, "r3")
        await child.start()
        with psycopg.connect(store.conninfo) as conn:  # as a child step of r2 starts it
            conn.execute(
                f"UPDATE {store.schema}.runs SET parent_run_id = 'r2', parent_step = 'c', "
                "parent_close = 'abandon' WHERE run_id = 'r3'"
            )
        assert (await child.finish("1")).ok
        # r2 has a child: its end (which would close the child) goes the long way too.
        await other.reload()
        assert (await other.finish("2")).ok
        # A run that ends at its first decision, with no attempt's result.
        quick = Driver(store, "r4")
        await quick.start()
        assert (await quick.finish(None)).ok
        for run_id in ("r1", "r2", "r3", "r4"):
            history = await store.load_history(TENANT, run_id)
            assert verify_chain(history, run=(TENANT, run_id)) == []
        ended = [(await store.load_run(TENANT, r))[0] for r in ("r1", "r2", "r3", "r4")]
        assert [r.status if r else None for r in ended] == ["completed"] * 4
        assert [e.type for e in await store.load_history(TENANT, "r2")][-3:] == [
            E.CHILD_COMPLETED,
            E.ACTIVITY_COMPLETED,
            E.RUN_COMPLETED,
        ]
        return dict(store.stats)
    finally:
        await store.close()


def test_steps_made_in_one_statement_leave_every_row_as_the_long_way_does(
    fresh_postgres: str,
) -> None:
    fast = asyncio.run(scripted(f"{fresh_postgres}?schema=fast"))
    slow = asyncio.run(scripted(f"{fresh_postgres}?schema=slow&step_statement=off"))
    # r1's four steps and its end, and r4's end, went in one statement each; r2's woken
    # step, r3's end (it has a parent) and r2's (it has a child) could not.
    assert fast["step_statements"] == 6
    assert slow["step_statements"] == 0
    fast_rows, slow_rows = rows(fresh_postgres, "fast"), rows(fresh_postgres, "slow")
    assert fast_rows["events"], fast_rows
    for table in TABLES:
        assert fast_rows[table] == slow_rows[table], table


@pytest.mark.parametrize("statement", ["on", "off"])
def test_a_step_whose_condition_fails_writes_nothing_and_names_the_conflict(
    fresh_postgres: str, statement: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"{fresh_postgres}?step_statement={statement}"
    sent: list[str] = []
    step_statement = PostgresTx.step_statement

    def counted(self: PostgresTx, name: str, params: dict[str, Any]) -> Any:
        sent.append(name)
        return step_statement(self, name, params)

    monkeypatch.setattr(PostgresTx, "step_statement", counted)

    async def attempt() -> dict[str, Any]:
        store = PostgresStore(url)
        await store.open()
        try:
            run = Driver(store, "r1")
            await run.start()
            before = rows(fresh_postgres, "waypost")
            answers: dict[str, Any] = {
                "activity fence": await run.step("1", ["2"], fence=7),
                "workflow fence": await run.step("1", ["2"], wf_fence=3),
                "sequence": await run.step("1", ["2"], stale=True),
            }
            assert rows(fresh_postgres, "waypost") == before  # nothing written, by any
            answers["stepped"] = store.stats["step_statements"]
            return answers
        finally:
            await store.close()

    answers = asyncio.run(attempt())
    assert answers["activity fence"].conflict is Conflict.ACTIVITY_FENCE
    assert answers["workflow fence"].conflict is Conflict.WORKFLOW_FENCE
    assert answers["sequence"].conflict is Conflict.SEQ
    assert answers["stepped"] == 0
    # Each refused step tried its statement once, then went the long way without it.
    assert sent == (["commit_step"] * 3 if statement == "on" else [])


def test_an_attempt_of_a_queue_with_a_limit_waits_for_a_claim(fresh_postgres: str) -> None:
    """The step statement leases only attempts of queues without limits; one of a limited
    queue goes the long way, which leaves the attempt ready for a claim that counts it."""

    async def attempt() -> tuple[CommitResult, list[Any], int]:
        store = PostgresStore(fresh_postgres)
        await store.open()
        try:
            with psycopg.connect(fresh_postgres) as conn:
                conn.execute(
                    "INSERT INTO waypost.queues (tenant, name, concurrency, tokens, "
                    "refilled_at, updated_at, updated_by) VALUES (%s, 'slow', 1, 0, 0, 0, 'x')",
                    (TENANT,),
                )
            run = Driver(store, "r1")
            await run.start()
            now = T0 + 5
            result = await run.commit(
                [
                    NewEvent(E.ACTIVITY_COMPLETED, {"step": "1", "result": 1}, now),
                    NewEvent(E.ACTIVITY_SCHEDULED, {"step": "2"}, now),
                ],
                [task("2", queue="slow")],
                "1",
            )
            return result, await store.run_tasks(TENANT, "r1"), store.stats["step_statements"]
        finally:
            await store.close()

    result, tasks, stepped = asyncio.run(attempt())
    assert result.ok and result.queued_steps == ("2",)
    (attempt_task,) = [t for t in tasks if t.kind == "activity"]
    assert (attempt_task.step, attempt_task.owner, attempt_task.fence) == ("2", None, 0)
    assert stepped == 0


def test_the_step_statement_is_an_option_of_the_url() -> None:
    assert parse_postgres_url("postgresql://h/db")[1]["step_statement"] is True
    _, options = parse_postgres_url("postgresql://h/db?step_statement=off&x=1")
    assert options["step_statement"] is False
    with pytest.raises(ConfigurationError, match="step_statement=maybe"):
        parse_postgres_url("postgresql://h/db?step_statement=maybe")


def test_a_step_with_a_time_json_cannot_hold_goes_the_long_way(fresh_postgres: str) -> None:
    """An infinite heartbeat timeout has no JSON form: the step is written the long way."""

    async def attempt() -> tuple[bool, int, list[Any]]:
        store = PostgresStore(fresh_postgres)
        await store.open()
        try:
            run = Driver(store, "r1")
            await run.start()
            endless = NewActivityTask(
                "2", "act", {"activity": "act", "step": "2"}, 60.0, float("inf"), owner="w1"
            )
            now = T0 + 5
            result = await run.commit(
                [NewEvent(E.ACTIVITY_COMPLETED, {"step": "1"}, now)], [endless], "1"
            )
            tasks = await store.run_tasks(TENANT, "r1")
            return result.ok, store.stats["step_statements"], tasks
        finally:
            await store.close()

    ok, stepped, tasks = asyncio.run(attempt())
    assert ok and stepped == 0
    (leased,) = [t for t in tasks if t.kind == "activity"]
    assert (leased.step, leased.owner, leased.heartbeat_deadline) == ("2", "w1", float("inf"))


@pytest.mark.parametrize("statement", ["on", "off"])
def test_a_lone_step_is_sent_without_begin_and_commit(
    fresh_postgres: str, statement: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step with nothing to group with is its statement alone (atomic by itself, two
    round trips fewer); the long way (`?step_statement=off`) opens a transaction."""
    opened: list[bool] = []
    transaction = psycopg.Connection.transaction

    def counted(self: psycopg.Connection[Any], *args: Any, **kwargs: Any) -> Any:
        opened.append(True)
        return transaction(self, *args, **kwargs)

    async def attempt() -> tuple[bool, int, int]:
        store = PostgresStore(f"{fresh_postgres}?step_statement={statement}")
        await store.open()
        try:
            run = Driver(store, "r1")
            await run.start()
            monkeypatch.setattr(psycopg.Connection, "transaction", counted)
            result = await run.step("1", ["2"])
            monkeypatch.undo()
            history = await store.load_history(TENANT, "r1")
            assert verify_chain(history, run=(TENANT, "r1")) == []
            return result.ok, len(opened), len(history)
        finally:
            await store.close()

    ok, transactions, events = asyncio.run(attempt())
    assert ok and events == 4  # started, scheduled; completed, scheduled
    assert transactions == (0 if statement == "on" else 1)
