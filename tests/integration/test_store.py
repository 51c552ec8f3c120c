"""The store, tested through its Protocol against a real database.

The first part is a conformance suite: every test takes the `store` fixture,
which is parametrised over the store implementations. Today that is SQLite,
twice: once with every write going through the writer thread (group commit)
and once with commits run inline on the caller's thread (what the engine
does at low load). A PostgreSQL store joins by adding a param to `STORES`
and a branch to `_fresh_database_url`.

The second part is SQLite-specific: the schema files, migrations, URL
parsing and how requests are grouped into one transaction.

Times handed to the store are explicit (`now=`), so nothing here depends on
the wall clock.
"""

from __future__ import annotations

import asyncio
import re
import sqlite3
import threading
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

import waypost as wp
from waypost.errors import ConfigurationError, SchemaError, StoreError
from waypost.model.chain import verify_chain
from waypost.model.events import EventType, NewEvent
from waypost.store import open_store
from waypost.store.base import (
    ActivityTaskOp,
    ActivityUpdate,
    ClaimedTask,
    Conflict,
    CreateRunResult,
    LeaseRenewal,
    NewActivityTask,
    NewRun,
    NewTimer,
    RunCommit,
    Snapshot,
    Store,
    TaskRef,
    WorkerRecord,
    WorkflowTaskOp,
)
from waypost.store.sqlfile import load_migrations, load_schema
from waypost.store.sqlite import SqliteStore

T = TypeVar("T")
E = EventType
T0 = 1_700_000_000.0
TENANT = "default"
WF_QUEUE = "wf@1"

# == fixtures =================================================================

STORES = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("sqlite-inline", id="sqlite-inline"),
    pytest.param("sqlite-thread", id="sqlite-thread"),
    pytest.param("postgres", id="postgres"),
]


def _fresh_database_url(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if kind == "sqlite-thread":  # every write through the writer thread
        return f"sqlite:///{tmp_path / 'store.db'}?commits=thread"
    if kind.startswith("sqlite"):
        return f"sqlite:///{tmp_path / 'store.db'}"
    if kind == "postgres":
        url: str = request.getfixturevalue("fresh_postgres")
        return url
    raise AssertionError(f"no database for store kind {kind!r}")


def _prepare(kind: str, store: Store) -> Store:
    if kind == "sqlite-inline":
        # As under an engine at low load: a commit with nothing to group with
        # runs on the caller's thread instead of the writer thread.
        store.inline_probe = lambda: True  # type: ignore[attr-defined]
    return store


@pytest.fixture
def aio() -> Iterator[asyncio.Runner]:
    """One event loop for the whole test (a store may bind connections to its loop)."""
    with asyncio.Runner() as runner:
        yield runner


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest, tmp_path: Path, aio: asyncio.Runner) -> Iterator[Store]:
    """An open store on a fresh, empty database."""
    kind: str = request.param
    s = _prepare(kind, open_store(_fresh_database_url(kind, request, tmp_path)))
    aio.run(s.open())
    yield s
    aio.run(s.close())


@pytest.fixture
def other_store(
    request: pytest.FixtureRequest, store: Store, aio: asyncio.Runner
) -> Iterator[Store]:
    """A second, independent store on the same database (another process, in effect)."""
    kind = request.node.callspec.params["store"]
    s = _prepare(kind, open_store(store.url))
    aio.run(s.open())
    yield s
    aio.run(s.close())


# == helpers ==================================================================


def ev(type_: EventType, ts: float = T0, **data: Any) -> NewEvent:
    return NewEvent(type_, data, ts)


async def make_run(
    store: Store, run_id: str, *, owner: str | None = None, ts: float = T0, tenant: str = TENANT
) -> CreateRunResult:
    return await store.create_run(
        NewRun(
            tenant=tenant,
            run_id=run_id,
            workflow="wf",
            version="1",
            input={"n": 1, "run": run_id},
            ts=ts,
            started=ev(E.RUN_STARTED, ts, workflow="wf", version="1", input={"n": 1}),
            claim_owner=owner,
            lease=30.0,
        )
    )


def activity_task(
    step: str, *, timeout: float = 60.0, heartbeat_timeout: float | None = None
) -> NewActivityTask:
    return NewActivityTask(
        step=step,
        activity="act",
        spec={"activity": "act", "step": step, "timeout": timeout},
        timeout=timeout,
        heartbeat_timeout=heartbeat_timeout,
    )


async def schedule_activities(
    store: Store, run_id: str, *tasks: NewActivityTask, now: float = T0
) -> None:
    res = await store.commit_run(
        RunCommit(
            tenant=TENANT,
            run_id=run_id,
            events=[ev(E.ACTIVITY_SCHEDULED, now, step=t.step, activity="act") for t in tasks],
            now=now,
            new_activities=tasks,
        )
    )
    assert res.ok, res


async def state(store: Store, run_id: str, tenant: str = TENANT) -> tuple[Any, ...]:
    """Everything the store holds about a run, in comparable form."""
    run, events = await store.load_run(tenant, run_id)
    tasks = await store.run_tasks(tenant, run_id)
    return run, [(e.seq, e.type, e.data_json, e.ts, e.hash) for e in events], tasks


async def claim_activities(
    store: Store, owner: str, *, now: float = T0, limit: int = 10, lease: float = 30.0
) -> list[ClaimedTask]:
    return await store.claim_tasks(owner, [], ["act"], 0, limit, lease, now)


async def claim_workflows(
    store: Store, owner: str, *, now: float = T0, limit: int = 10, lease: float = 30.0
) -> list[ClaimedTask]:
    return await store.claim_tasks(owner, [WF_QUEUE], [], limit, 0, lease, now)


def run(aio: asyncio.Runner, body: Callable[[], Awaitable[T]]) -> T:
    return aio.run(body())  # type: ignore[arg-type]


# == create_run ===============================================================


def test_create_run_writes_the_first_event_and_a_workflow_task(
    store: Store, aio: asyncio.Runner
) -> None:
    async def body() -> None:
        created = await make_run(store, "r1")
        assert created.created
        assert created.workflow_fence is None
        run, events = await store.load_run(TENANT, "r1")
        assert run is not None
        assert (run.status, run.last_seq, run.workflow, run.version) == ("running", 1, "wf", "1")
        assert run.input == {"n": 1, "run": "r1"}
        assert [(e.seq, e.type) for e in events] == [(1, "RunStarted")]
        assert run.last_hash == events[0].hash
        assert verify_chain(events, run=(TENANT, "r1")) == []
        (task,) = await store.run_tasks(TENANT, "r1")
        assert (task.kind, task.step, task.queue, task.fence, task.owner) == (
            "workflow",
            "",
            WF_QUEUE,
            0,
            None,
        )

        again = await make_run(store, "r1", ts=T0 + 5)
        assert not again.created
        assert again.run == run
        assert len(await store.load_history(TENANT, "r1")) == 1

        # The same run id in another tenant is another run.
        other = await make_run(store, "r1", tenant="acme")
        assert other.created
        assert (await store.get_run("acme", "r1")) is not None
        assert await store.get_run(TENANT, "missing") is None

    run(aio, body)


def test_create_run_with_an_owner_leases_the_workflow_task(
    store: Store, aio: asyncio.Runner
) -> None:
    async def body() -> None:
        created = await make_run(store, "r1", owner="w1")
        assert created.workflow_fence == 1
        (task,) = await store.run_tasks(TENANT, "r1")
        assert (task.owner, task.fence, task.visible_at) == ("w1", 1, T0 + 30.0)
        # Leased: nobody else can claim it until the lease lapses.
        assert await claim_workflows(store, "w2", now=T0 + 29) == []
        (taken,) = await claim_workflows(store, "w2", now=T0 + 31)
        assert (taken.owner, taken.fence) == ("w2", 2)

    run(aio, body)


# == commit_run: appends, chain, snapshot =====================================


def test_events_are_numbered_and_hash_chained_across_commits(
    store: Store, aio: asyncio.Runner
) -> None:
    async def body() -> None:
        await make_run(store, "r1")
        res = await store.commit_run(
            RunCommit(
                TENANT,
                "r1",
                [ev(E.SIGNAL_RECEIVED, T0 + 1, name="a", payload={"x": "é"})],
                now=T0 + 1,
            )
        )
        assert res.ok
        assert (res.prev_seq, res.last_seq) == (1, 2)
        # With an explicit expected head.
        res2 = await store.commit_run(
            RunCommit(
                TENANT,
                "r1",
                [
                    ev(E.SIGNAL_RECEIVED, T0 + 2.25, name="b", payload=[1, 2.5, None]),
                    ev(E.MARKER_RECORDED, T0 + 2.5, step="1", kind="now", value=T0),
                ],
                now=T0 + 2.5,
                expect_seq=2,
                expect_hash=res.last_hash,
                snapshot=Snapshot("waiting", [{"kind": "signal", "name": "c"}], processed_seq=4),
            )
        )
        assert res2.ok
        assert [e.seq for e in res2.events] == [3, 4]
        assert res2.last_hash == res2.events[-1].hash

        run_, events = await store.load_run(TENANT, "r1")
        assert run_ is not None
        assert [e.seq for e in events] == [1, 2, 3, 4]
        assert [e.type for e in events] == [
            "RunStarted",
            "SignalReceived",
            "SignalReceived",
            "MarkerRecorded",
        ]
        assert verify_chain(events, run=(TENANT, "r1")) == []
        assert events[1].data == {"name": "a", "payload": {"x": "é"}}
        assert events[2].ts == T0 + 2.25
        assert (run_.last_seq, run_.last_hash) == (4, events[-1].hash)
        assert (run_.status, run_.processed_seq) == ("waiting", 4)
        assert run_.waiting_for == [{"kind": "signal", "name": "c"}]
        assert run_.updated_at == T0 + 2.5
        # The events returned by the commit are the ones stored.
        assert [(e.seq, e.hash) for e in res2.events] == [(e.seq, e.hash) for e in events[2:]]
        assert [e.seq for e in await store.load_history(TENANT, "r1", after_seq=2)] == [3, 4]

    run(aio, body)


def test_a_commit_never_breaks_the_hash_chain(store: Store, aio: asyncio.Runner) -> None:
    """An expected head whose hash is not the stored one is not a head to chain on."""

    async def body() -> None:
        created = await make_run(store, "r1")
        res = await store.commit_run(
            RunCommit(
                TENANT,
                "r1",
                [ev(E.SIGNAL_RECEIVED, T0 + 1, name="a")],
                now=T0 + 1,
                expect_seq=created.run.last_seq,
                expect_hash="0" * 64,
            )
        )
        run_, events = await store.load_run(TENANT, "r1")
        assert run_ is not None
        # Refusing (a sequence conflict) or chaining correctly are both fine;
        # storing an event that does not chain to its predecessor is not.
        assert verify_chain(events, run=(TENANT, "r1")) == []
        assert (run_.last_seq, run_.last_hash) == (events[-1].seq, events[-1].hash)
        if res.ok:
            assert res.last_hash == events[-1].hash
        else:
            assert res.conflict is Conflict.SEQ
            assert len(events) == 1

    run(aio, body)


async def _busy_run(store: Store) -> tuple[Any, ...]:
    """A run with a leased workflow task (fence 1), a leased activity (fence 1), a timer."""
    await make_run(store, "r1", owner="w1")
    res = await store.commit_run(
        RunCommit(
            TENANT,
            "r1",
            [
                ev(E.ACTIVITY_SCHEDULED, step="1", activity="act"),
                ev(E.TIMER_STARTED, step="2", fire_at=T0 + 100),
            ],
            now=T0,
            expect_seq=1,
            expect_hash=(await store.get_run(TENANT, "r1")).last_hash,  # type: ignore[union-attr]
            snapshot=Snapshot("running", [{"kind": "activity", "step": "1"}], 1),
            workflow_fence=1,
            workflow_op=WorkflowTaskOp.IDLE,
            new_activities=[activity_task("1")],
            new_timers=[NewTimer("2", T0 + 100)],
        )
    )
    assert res.ok, res
    (claimed,) = await claim_activities(store, "w2", now=T0 + 1)
    assert claimed.fence == 1
    return res.last_seq, res.last_hash


def _full_commit(seq: int, hash_: str, *, workflow_fence: int = 1, activity_fence: int = 1) -> Any:
    """A commit touching every kind of row: events, snapshot, tasks, timers."""
    return RunCommit(
        TENANT,
        "r1",
        [
            ev(E.ACTIVITY_COMPLETED, T0 + 2, step="1", attempt=1, result=42),
            ev(E.ACTIVITY_SCHEDULED, T0 + 2, step="3", activity="act"),
            ev(E.TIMER_STARTED, T0 + 2, step="4", fire_at=T0 + 10),
        ],
        now=T0 + 2,
        expect_seq=seq,
        expect_hash=hash_,
        snapshot=Snapshot("running", [{"kind": "activity", "step": "3"}], seq + 1),
        workflow_fence=workflow_fence,
        workflow_op=WorkflowTaskOp.IDLE,
        activity=ActivityUpdate("1", activity_fence, ActivityTaskOp.DONE),
        new_activities=[activity_task("3")],
        new_timers=[NewTimer("4", T0 + 10)],
        cancel_timers=["2"],
    )


@pytest.mark.parametrize(
    ("stale", "conflict"),
    [
        ({"seq": -1}, Conflict.SEQ),
        ({"workflow_fence": 0}, Conflict.WORKFLOW_FENCE),
        ({"workflow_fence": 2}, Conflict.WORKFLOW_FENCE),
        ({"activity_fence": 0}, Conflict.ACTIVITY_FENCE),
        ({"activity_fence": 2}, Conflict.ACTIVITY_FENCE),
    ],
    ids=["seq", "workflow-fence-old", "workflow-fence-future", "activity-old", "activity-future"],
)
def test_a_failed_condition_names_itself_and_writes_nothing(
    store: Store, aio: asyncio.Runner, stale: dict[str, int], conflict: Conflict
) -> None:
    async def body() -> None:
        seq, hash_ = await _busy_run(store)
        before = await state(store, "r1")
        next_timer = await store.next_timer_at()
        assert next_timer == T0 + 100

        commit = _full_commit(
            seq + stale.get("seq", 0),
            hash_,
            workflow_fence=stale.get("workflow_fence", 1),
            activity_fence=stale.get("activity_fence", 1),
        )
        res = await store.commit_run(commit)
        assert res.conflict is conflict
        assert not res.ok
        assert res.events == []

        assert await state(store, "r1") == before
        # Neither the new timer (due at T0+10) nor the cancel of the old one happened.
        assert await store.next_timer_at() == next_timer
        assert await store.fire_due_timers(T0 + 50, 10, None, [], 30.0) == []

        # The same commit with current conditions goes through.
        ok = await store.commit_run(_full_commit(seq, hash_))
        assert ok.ok, ok
        assert ok.last_seq == seq + 3
        tasks = await store.run_tasks(TENANT, "r1")
        assert [(t.kind, t.step) for t in tasks] == [("workflow", ""), ("activity", "3")]
        assert await store.next_timer_at() == T0 + 10

    run(aio, body)


def test_a_commit_to_a_missing_run_is_refused(store: Store, aio: asyncio.Runner) -> None:
    async def body() -> None:
        for expect in (None, 1):
            res = await store.commit_run(
                RunCommit(TENANT, "nope", [ev(E.SIGNAL_RECEIVED, name="x")], T0, expect_seq=expect)
            )
            assert res.conflict is Conflict.RUN_NOT_FOUND
        assert await store.load_history(TENANT, "nope") == []
        assert await store.get_run(TENANT, "nope") is None

    run(aio, body)


async def _finish(store: Store, run_id: str) -> None:
    run_ = await store.get_run(TENANT, run_id)
    assert run_ is not None
    res = await store.commit_run(
        RunCommit(
            TENANT,
            run_id,
            [ev(E.RUN_COMPLETED, T0 + 3, result="done")],
            now=T0 + 3,
            expect_seq=run_.last_seq,
            expect_hash=run_.last_hash,
            snapshot=Snapshot("completed", [], run_.last_seq, result="done", finished=True),
            workflow_op=WorkflowTaskOp.DELETE,
        )
    )
    assert res.ok, res


def test_finishing_a_run_removes_its_tasks_and_timers(store: Store, aio: asyncio.Runner) -> None:
    async def body() -> None:
        await _busy_run(store)
        await _finish(store, "r1")
        run_ = await store.get_run(TENANT, "r1")
        assert run_ is not None
        assert (run_.status, run_.result, run_.finished_at) == ("completed", "done", T0 + 3)
        assert await store.run_tasks(TENANT, "r1") == []
        assert await store.next_timer_at() is None
        assert await store.fire_due_timers(T0 + 1000, 10, None, [], 30.0) == []
        assert await claim_activities(store, "w3", now=T0 + 1000) == []
        assert await claim_workflows(store, "w3", now=T0 + 1000) == []
        assert await store.expired_activities(T0 + 1000, 10) == []

    run(aio, body)


def test_require_active_refuses_a_finished_run(store: Store, aio: asyncio.Runner) -> None:
    async def body() -> None:
        await make_run(store, "r1")
        await _finish(store, "r1")
        before = await state(store, "r1")
        res = await store.commit_run(
            RunCommit(
                TENANT,
                "r1",
                [ev(E.SIGNAL_RECEIVED, T0 + 4, name="late")],
                now=T0 + 4,
                require_active=True,
                workflow_op=WorkflowTaskOp.WAKE,
            )
        )
        assert res.conflict is Conflict.RUN_FINISHED
        assert res.status == "completed"
        assert await state(store, "r1") == before
        # Without the condition an audit fact may still follow the end.
        audit = await store.commit_run(
            RunCommit(TENANT, "r1", [ev(E.LATE_RESULT_IGNORED, T0 + 5, step="1")], T0 + 5)
        )
        assert audit.ok
        assert audit.last_seq == before[0].last_seq + 1

    run(aio, body)


def test_require_active_holds_when_the_expected_head_is_given(
    store: Store, aio: asyncio.Runner
) -> None:
    """`require_active` is a condition of its own; naming the head must not skip it."""

    async def body() -> None:
        await make_run(store, "r1")
        await _finish(store, "r1")
        run_ = await store.get_run(TENANT, "r1")
        assert run_ is not None
        before = await state(store, "r1")
        res = await store.commit_run(
            RunCommit(
                TENANT,
                "r1",
                [ev(E.SIGNAL_RECEIVED, T0 + 4, name="late")],
                now=T0 + 4,
                expect_seq=run_.last_seq,
                expect_hash=run_.last_hash,
                require_active=True,
            )
        )
        assert res.conflict is Conflict.RUN_FINISHED
        assert await state(store, "r1") == before

    run(aio, body)


# == group commit =============================================================


def test_concurrent_commits_all_land_and_a_conflict_fails_alone(
    store: Store, aio: asyncio.Runner
) -> None:
    async def body() -> None:
        n = 40
        heads = {}
        for i in range(n):
            created = await make_run(store, f"r{i}")
            heads[f"r{i}"] = (created.run.last_seq, created.run.last_hash)
        await make_run(store, "stale")
        before_stale = await state(store, "stale")

        def commit(run_id: str, expect_seq: int, expect_hash: str, tag: str) -> RunCommit:
            return RunCommit(
                TENANT,
                run_id,
                [
                    ev(E.SIGNAL_RECEIVED, T0 + 1, name=tag),
                    ev(E.SIGNAL_RECEIVED, T0 + 1, name=f"{tag}-2"),
                ],
                now=T0 + 1,
                expect_seq=expect_seq,
                expect_hash=expect_hash,
                snapshot=Snapshot("waiting", [{"kind": "signal", "name": tag}], expect_seq + 2),
            )

        commits = [commit(r, *heads[r], tag=f"main-{r}") for r in heads]
        # Two commits race for the same head of r0: exactly one may win.
        commits.insert(n // 2, commit("r0", *heads["r0"], tag="rival"))
        # A stale head in the middle of the others.
        commits.insert(n // 3, commit("stale", 7, "x", tag="stale"))
        results = await asyncio.gather(*(store.commit_run(c) for c in commits))

        by_tag = {c.events[0].data["name"]: r for c, r in zip(commits, results, strict=True)}
        assert by_tag["stale"].conflict is Conflict.SEQ
        assert await state(store, "stale") == before_stale
        r0_outcomes = sorted(str(by_tag[t].conflict) for t in ("main-r0", "rival"))
        assert r0_outcomes == ["None", "seq"]
        for i in range(1, n):
            assert by_tag[f"main-r{i}"].ok, by_tag[f"main-r{i}"]
        for i in range(n):
            run_, events = await store.load_run(TENANT, f"r{i}")
            assert run_ is not None
            assert [e.seq for e in events] == [1, 2, 3]
            assert verify_chain(events, run=(TENANT, f"r{i}")) == []
            assert run_.last_seq == 3
            winner = events[1].data["name"]
            assert winner in (f"main-r{i}", "rival")
            assert run_.waiting_for == [{"kind": "signal", "name": winner}]

    run(aio, body)


# == activity tasks: claims, leases, releases, expiry =========================


def test_a_ready_activity_is_leased_once_and_its_fence_bumped(
    store: Store, aio: asyncio.Runner
) -> None:
    async def body() -> None:
        await make_run(store, "r1")
        await schedule_activities(
            store, "r1", activity_task("1", timeout=10.0, heartbeat_timeout=4.0)
        )
        (ready,) = [t for t in await store.run_tasks(TENANT, "r1") if t.kind == "activity"]
        assert (ready.fence, ready.attempt, ready.owner) == (0, 0, None)

        (claimed,) = await claim_activities(store, "w1", now=T0 + 1, lease=30.0)
        assert (claimed.kind, claimed.run_id, claimed.step, claimed.queue) == (
            "activity",
            "r1",
            "1",
            "act",
        )
        assert (claimed.fence, claimed.attempt, claimed.owner) == (1, 1, "w1")
        assert claimed.deadline == T0 + 11.0
        assert claimed.heartbeat_deadline == T0 + 5.0
        # The lease never outlives the deadlines.
        assert claimed.visible_at == T0 + 5.0
        assert claimed.spec == {"activity": "act", "step": "1", "timeout": 10.0}

        assert await claim_activities(store, "w1", now=T0 + 2) == []
        assert await claim_activities(store, "w2", now=T0 + 2) == []
        # An expired activity lease is not taken by a claim: it is expired (reported).
        assert await claim_activities(store, "w2", now=T0 + 100) == []

    run(aio, body)


def test_two_claimers_never_get_the_same_task(
    store: Store, other_store: Store, aio: asyncio.Runner
) -> None:
    async def body() -> None:
        n = 30
        for i in range(n):
            await make_run(store, f"r{i}")
            await schedule_activities(store, f"r{i}", activity_task("1"))
        a, b, c, d = await asyncio.gather(
            claim_activities(store, "w1", now=T0 + 1, limit=n),
            claim_activities(other_store, "w2", now=T0 + 1, limit=n),
            claim_workflows(store, "w1", now=T0 + 1, limit=n),
            claim_workflows(other_store, "w2", now=T0 + 1, limit=n),
        )
        for mine, theirs in ((a, b), (c, d)):
            ids_mine = {t.run_id for t in mine}
            ids_theirs = {t.run_id for t in theirs}
            assert ids_mine.isdisjoint(ids_theirs)
            assert ids_mine | ids_theirs == {f"r{i}" for i in range(n)}
            assert len(mine) + len(theirs) == n
            assert all(t.fence == 1 for t in [*mine, *theirs])
        for t in [*a, *c]:
            assert t.owner == "w1"
        for t in [*b, *d]:
            assert t.owner == "w2"

    run(aio, body)


def test_claims_respect_queues_limits_and_visibility(store: Store, aio: asyncio.Runner) -> None:
    async def body() -> None:
        await make_run(store, "r1")
        await store.commit_run(
            RunCommit(
                TENANT,
                "r1",
                [],
                now=T0,
                new_activities=[
                    activity_task("1"),
                    activity_task("2"),
                    NewActivityTask("3", "other", {"step": "3"}, 60.0, None),
                ],
            )
        )
        assert await store.claim_tasks("w1", ["nope@1"], ["nope"], 10, 10, 30.0, T0) == []
        first = await claim_activities(store, "w1", now=T0, limit=1)
        assert len(first) == 1
        second = await claim_activities(store, "w1", now=T0, limit=10)
        assert {t.step for t in [*first, *second]} == {"1", "2"}
        (other,) = await store.claim_tasks("w1", [], ["other"], 0, 10, 30.0, T0)
        assert other.step == "3"
        # The workflow task was created visible at T0: not claimable before.
        assert await claim_workflows(store, "w1", now=T0 - 1) == []
        assert len(await claim_workflows(store, "w1", now=T0)) == 1

    run(aio, body)


def test_release_puts_a_task_back_for_anyone(store: Store, aio: asyncio.Runner) -> None:
    async def body() -> None:
        await make_run(store, "r1")
        await schedule_activities(store, "r1", activity_task("1"))
        (t,) = await claim_activities(store, "w1", now=T0 + 1)
        ref = TaskRef(TENANT, "r1", "activity", "1", t.fence)
        # Only the holder, with the current fence, can release.
        await store.release_tasks("w2", [ref], T0 + 2)
        await store.release_tasks("w1", [TaskRef(TENANT, "r1", "activity", "1", 0)], T0 + 2)
        assert await claim_activities(store, "w3", now=T0 + 2) == []

        await store.release_tasks("w1", [ref], T0 + 2)
        (again,) = await claim_activities(store, "w2", now=T0 + 2)
        assert again.owner == "w2"
        assert again.fence == t.fence + 1
        # A released attempt never started: it does not count as an attempt.
        assert again.attempt == 1
        # The old holder's fence is dead: its report is refused.
        res = await store.commit_run(
            RunCommit(
                TENANT,
                "r1",
                [ev(E.ACTIVITY_COMPLETED, step="1")],
                T0 + 3,
                activity=ActivityUpdate("1", t.fence, ActivityTaskOp.DONE),
            )
        )
        assert res.conflict is Conflict.ACTIVITY_FENCE

        # Workflow tasks too.
        (wt,) = await claim_workflows(store, "w1", now=T0 + 3)
        await store.release_tasks("w1", [TaskRef(TENANT, "r1", "workflow", "", wt.fence)], T0 + 3)
        (wt2,) = await claim_workflows(store, "w2", now=T0 + 3)
        assert wt2.fence == wt.fence + 1

    run(aio, body)


def test_expired_activities_are_reported_by_lease_deadline_and_heartbeat(
    store: Store, aio: asyncio.Runner
) -> None:
    async def body() -> None:
        for run_id in ("lease", "deadline", "heartbeat", "live"):
            await make_run(store, run_id)
        await schedule_activities(store, "lease", activity_task("1", timeout=100.0))
        await schedule_activities(store, "deadline", activity_task("1", timeout=5.0))
        await schedule_activities(
            store, "heartbeat", activity_task("1", timeout=100.0, heartbeat_timeout=3.0)
        )
        await schedule_activities(store, "live", activity_task("1", timeout=100.0))
        claimed = await claim_activities(store, "w1", now=T0, lease=10.0)
        assert len(claimed) == 4
        assert await store.expired_activities(T0 + 2, 10) == []

        # "live" keeps renewing; the others go quiet.
        states = await store.renew_leases(
            "w1",
            [LeaseRenewal(TaskRef(TENANT, "live", "activity", "1", 1))],
            10.0,
            T0 + 9,
        )
        assert [(s.held, s.cancel_requested) for s in states] == [(True, False)]

        expired = await store.expired_activities(T0 + 3.5, 10)
        assert [t.run_id for t in expired] == ["heartbeat"]
        assert expired[0].heartbeat_deadline == T0 + 3.0
        expired = await store.expired_activities(T0 + 6, 10)
        assert [t.run_id for t in expired] == ["heartbeat", "deadline"]
        expired = await store.expired_activities(T0 + 11, 10)
        assert [t.run_id for t in expired] == ["heartbeat", "deadline", "lease"]
        assert all(t.owner == "w1" and t.fence == 1 for t in expired)
        assert len(await store.expired_activities(T0 + 11, 2)) == 2
        assert [t.run_id for t in await store.expired_activities(T0 + 19.5, 10)] == [
            "heartbeat",
            "deadline",
            "lease",
            "live",
        ]

    run(aio, body)


def test_heartbeats_extend_the_heartbeat_deadline_and_keep_details(
    store: Store, aio: asyncio.Runner
) -> None:
    async def body() -> None:
        await make_run(store, "r1")
        await schedule_activities(
            store, "r1", activity_task("1", timeout=100.0, heartbeat_timeout=3.0)
        )
        (t,) = await claim_activities(store, "w1", now=T0, lease=10.0)
        ref = TaskRef(TENANT, "r1", "activity", "1", t.fence)
        await store.renew_leases(
            "w1",
            [LeaseRenewal(ref, heartbeat_at=T0 + 2, heartbeat_details='{"done":2}')],
            10,
            T0 + 2,
        )
        assert await store.expired_activities(T0 + 4.5, 10) == []
        (exp,) = await store.expired_activities(T0 + 5.5, 10)
        assert exp.heartbeat_deadline == T0 + 5.0
        assert exp.heartbeat_details == {"done": 2}

        # Another holder (or a stale fence) cannot renew: the lease is reported lost.
        lost = await store.renew_leases("w2", [LeaseRenewal(ref)], 10, T0 + 3)
        assert [s.held for s in lost] == [False]
        stale = TaskRef(TENANT, "r1", "activity", "1", t.fence + 1)
        assert [s.held for s in await store.renew_leases("w1", [LeaseRenewal(stale)], 10, T0)] == [
            False
        ]

    run(aio, body)


def test_many_leases_renew_in_one_call_each_answered_for_itself(
    store: Store, aio: asyncio.Runner
) -> None:
    async def body() -> None:
        runs = [f"r{i}" for i in range(6)]
        for run_id in runs:
            await make_run(store, run_id)
            await schedule_activities(store, run_id, activity_task("1", timeout=100.0))
        claimed = await claim_activities(store, "w1", now=T0, lease=10.0)
        assert len(claimed) == 6
        refs = {t.run_id: TaskRef(TENANT, t.run_id, "activity", "1", t.fence) for t in claimed}
        renewals = [LeaseRenewal(refs[r]) for r in runs[:4]]
        renewals.append(LeaseRenewal(TaskRef(TENANT, "r4", "activity", "1", 99)))  # stale fence
        renewals.append(LeaseRenewal(TaskRef(TENANT, "nope", "activity", "1", 1)))  # no task
        renewals.append(LeaseRenewal(refs["r5"], heartbeat_at=T0 + 8))  # with a heartbeat
        states = await store.renew_leases("w1", renewals, 10.0, T0 + 8)
        held = {(s.task.run_id, s.task.fence): s.held for s in states}
        assert len(states) == len(renewals)
        assert held == {
            **{(r, refs[r].fence): True for r in runs[:4]},
            ("r4", 99): False,
            ("nope", 1): False,
            ("r5", refs["r5"].fence): True,
        }
        assert not any(s.cancel_requested for s in states)
        # Another engine renews nothing of w1's.
        assert [s.held for s in await store.renew_leases("w2", renewals[:4], 10.0, T0)] == [
            False
        ] * 4
        # The renewed leases run to T0 + 18; r4's (not renewed) lapsed at T0 + 10.
        expired = await store.expired_activities(T0 + 12, 10)
        assert [t.run_id for t in expired] == ["r4"]

    run(aio, body)


def test_retry_makes_the_task_claimable_at_retry_at_with_details(
    store: Store, aio: asyncio.Runner
) -> None:
    async def body() -> None:
        await make_run(store, "r1")
        await schedule_activities(store, "r1", activity_task("1"))
        (t,) = await claim_activities(store, "w1", now=T0)
        res = await store.commit_run(
            RunCommit(
                TENANT,
                "r1",
                [ev(E.ACTIVITY_FAILED, T0 + 1, step="1", attempt=1, retrying=True)],
                T0 + 1,
                activity=ActivityUpdate(
                    "1", t.fence, ActivityTaskOp.RETRY, T0 + 5, heartbeat_details='{"page":7}'
                ),
            )
        )
        assert res.ok
        assert await claim_activities(store, "w2", now=T0 + 4.9) == []
        assert await store.expired_activities(T0 + 100, 10) == []
        (again,) = await claim_activities(store, "w2", now=T0 + 5)
        assert (again.attempt, again.fence, again.owner) == (2, t.fence + 1, "w2")
        assert again.heartbeat_details == {"page": 7}
        # Reporting twice with the fence of attempt 1 is refused.
        twice = await store.commit_run(
            RunCommit(
                TENANT,
                "r1",
                [ev(E.ACTIVITY_FAILED, step="1")],
                T0 + 6,
                activity=ActivityUpdate("1", t.fence, ActivityTaskOp.RETRY, T0 + 7),
            )
        )
        assert twice.conflict is Conflict.ACTIVITY_FENCE

    run(aio, body)


def test_cancelling_activities_drops_ready_ones_and_flags_running_ones(
    store: Store, aio: asyncio.Runner
) -> None:
    async def body() -> None:
        await make_run(store, "r1")
        await schedule_activities(store, "r1", activity_task("1"))
        (running,) = await claim_activities(store, "w1", now=T0)
        await schedule_activities(store, "r1", activity_task("2"), now=T0 + 1)
        res = await store.commit_run(
            RunCommit(
                TENANT,
                "r1",
                [
                    ev(E.ACTIVITY_CANCEL_REQUESTED, step="1"),
                    ev(E.ACTIVITY_CANCEL_REQUESTED, step="2"),
                ],
                T0 + 2,
                cancel_activities=["1", "2"],
            )
        )
        assert res.ok
        tasks = {t.step: t for t in await store.run_tasks(TENANT, "r1") if t.kind == "activity"}
        assert set(tasks) == {"1"}
        assert tasks["1"].cancel_requested
        (st,) = await store.renew_leases(
            "w1", [LeaseRenewal(TaskRef(TENANT, "r1", "activity", "1", running.fence))], 30, T0 + 3
        )
        assert (st.held, st.cancel_requested) == (True, True)
        assert await claim_activities(store, "w2", now=T0 + 10) == []

    run(aio, body)


# == workflow tasks ===========================================================


def test_wake_and_claim_of_the_workflow_task(store: Store, aio: asyncio.Runner) -> None:
    async def body() -> None:
        await make_run(store, "r1", owner="w1")
        head = await store.get_run(TENANT, "r1")
        assert head is not None
        idle = await store.commit_run(
            RunCommit(
                TENANT,
                "r1",
                [],
                T0,
                expect_seq=1,
                expect_hash=head.last_hash,
                snapshot=Snapshot("waiting", [], 1),
                workflow_fence=1,
                workflow_op=WorkflowTaskOp.IDLE,
            )
        )
        assert idle.ok
        assert await claim_workflows(store, "w2", now=T0 + 100) == []

        # A signal wakes it for whoever polls.
        woke = await store.commit_run(
            RunCommit(
                TENANT,
                "r1",
                [ev(E.SIGNAL_RECEIVED, T0 + 1, name="go")],
                T0 + 1,
                require_active=True,
                workflow_op=WorkflowTaskOp.WAKE,
            )
        )
        assert woke.ok
        assert woke.workflow_fence is None
        assert woke.workflow_queue == WF_QUEUE
        (t,) = await claim_workflows(store, "w2", now=T0 + 1)
        assert (t.owner, t.fence) == ("w2", 2)

        # CLAIM does not take a task someone holds ...
        held = await store.commit_run(
            RunCommit(
                TENANT,
                "r1",
                [ev(E.SIGNAL_RECEIVED, T0 + 2, name="again")],
                T0 + 2,
                workflow_op=WorkflowTaskOp.CLAIM,
                owner="w3",
                lease=30,
            )
        )
        assert held.ok
        assert held.workflow_fence is None
        # ... and the holder's commit with its fence still works; its stale head does not.
        stale = await store.commit_run(
            RunCommit(
                TENANT,
                "r1",
                [],
                T0 + 3,
                expect_seq=2,
                expect_hash=woke.last_hash,
                snapshot=Snapshot("waiting", [], 2),
                workflow_fence=2,
                workflow_op=WorkflowTaskOp.IDLE,
            )
        )
        assert stale.conflict is Conflict.SEQ
        # After the lease lapses, CLAIM takes it over with the next fence.
        taken = await store.commit_run(
            RunCommit(
                TENANT,
                "r1",
                [ev(E.SIGNAL_RECEIVED, T0 + 40, name="third")],
                T0 + 40,
                workflow_op=WorkflowTaskOp.CLAIM,
                owner="w3",
                lease=30,
            )
        )
        assert taken.workflow_fence == 3
        old = await store.commit_run(
            RunCommit(TENANT, "r1", [], T0 + 41, workflow_fence=2, workflow_op=WorkflowTaskOp.IDLE)
        )
        assert old.conflict is Conflict.WORKFLOW_FENCE
        # CLAIM restricted to other queues only wakes it.
        await store.commit_run(
            RunCommit(TENANT, "r1", [], T0 + 42, workflow_fence=3, workflow_op=WorkflowTaskOp.IDLE)
        )
        other = await store.commit_run(
            RunCommit(
                TENANT,
                "r1",
                [ev(E.SIGNAL_RECEIVED, T0 + 43, name="fourth")],
                T0 + 43,
                workflow_op=WorkflowTaskOp.CLAIM,
                owner="w4",
                claim_queues=frozenset({"other@1"}),
            )
        )
        assert other.workflow_fence is None
        (t4,) = await claim_workflows(store, "w5", now=T0 + 43)
        assert t4.fence == 4

    run(aio, body)


# == timers ===================================================================


async def _with_timer(store: Store, run_id: str, fire_at: float, step: str = "1") -> None:
    await make_run(store, run_id)
    res = await store.commit_run(
        RunCommit(
            TENANT,
            run_id,
            [ev(E.TIMER_STARTED, step=step, fire_at=fire_at)],
            T0,
            new_timers=[NewTimer(step, fire_at)],
        )
    )
    assert res.ok


def test_a_timer_fires_once_appends_timer_fired_and_wakes_the_run(
    store: Store, aio: asyncio.Runner
) -> None:
    async def body() -> None:
        await _with_timer(store, "r1", T0 + 10)
        await _with_timer(store, "r2", T0 + 20)
        assert await store.next_timer_at() == T0 + 10
        assert await store.fire_due_timers(T0 + 9.99, 10, None, [], 30) == []

        (fired,) = await store.fire_due_timers(T0 + 10, 10, "w1", [WF_QUEUE], 30)
        assert (fired.run_id, fired.step, fired.queue) == ("r1", "1", WF_QUEUE)
        assert fired.event.type == "TimerFired"
        assert fired.event.data == {"step": "1", "generation": 1}
        assert fired.workflow_fence == 1  # claimed for w1
        history = await store.load_history(TENANT, "r1")
        assert [e.type for e in history] == ["RunStarted", "TimerStarted", "TimerFired"]
        assert verify_chain(history, run=(TENANT, "r1")) == []
        assert history[-1].hash == fired.event.hash

        assert await store.fire_due_timers(T0 + 100, 10, "w1", [WF_QUEUE], 30) != []  # r2
        assert await store.fire_due_timers(T0 + 1000, 10, "w1", [WF_QUEUE], 30) == []
        assert await store.next_timer_at() is None
        for run_id in ("r1", "r2"):
            history = await store.load_history(TENANT, run_id)
            assert [e.type for e in history].count("TimerFired") == 1

    run(aio, body)


def test_a_timer_fired_without_an_owner_makes_the_run_claimable(
    store: Store, aio: asyncio.Runner
) -> None:
    async def body() -> None:
        await _with_timer(store, "r1", T0 + 10)
        (t,) = await claim_workflows(store, "w1", now=T0)
        await store.commit_run(
            RunCommit(TENANT, "r1", [], T0, workflow_fence=t.fence, workflow_op=WorkflowTaskOp.IDLE)
        )
        (fired,) = await store.fire_due_timers(T0 + 11, 10, None, [], 30)
        assert fired.workflow_fence is None
        (again,) = await claim_workflows(store, "w2", now=T0 + 11)
        assert again.fence == t.fence + 1

    run(aio, body)


def test_a_cancelled_timer_does_not_fire(store: Store, aio: asyncio.Runner) -> None:
    async def body() -> None:
        await _with_timer(store, "r1", T0 + 10)
        res = await store.commit_run(
            RunCommit(TENANT, "r1", [ev(E.TIMER_CANCELLED, step="1")], T0 + 1, cancel_timers=["1"])
        )
        assert res.ok
        assert await store.next_timer_at() is None
        assert await store.fire_due_timers(T0 + 1000, 10, "w1", [WF_QUEUE], 30) == []
        types = [e.type for e in await store.load_history(TENANT, "r1")]
        assert "TimerFired" not in types

    run(aio, body)


def test_two_stores_firing_at_once_fire_each_timer_once(
    store: Store, other_store: Store, aio: asyncio.Runner
) -> None:
    async def body() -> None:
        n = 25
        for i in range(n):
            await _with_timer(store, f"r{i}", T0 + 10 + i / 100)
        fired = []
        for _ in range(3):
            a, b = await asyncio.gather(
                store.fire_due_timers(T0 + 20, 100, "w1", [WF_QUEUE], 30),
                other_store.fire_due_timers(T0 + 20, 100, "w2", [WF_QUEUE], 30),
            )
            fired += [(t.run_id, t.step) for t in [*a, *b]]
        assert sorted(fired) == sorted((f"r{i}", "1") for i in range(n))
        for i in range(n):
            history = await store.load_history(TENANT, f"r{i}")
            assert [e.type for e in history].count("TimerFired") == 1
            assert verify_chain(history, run=(TENANT, f"r{i}")) == []

    run(aio, body)


# == list_runs, workers ========================================================


def test_list_runs_filters(store: Store, aio: asyncio.Runner) -> None:
    async def body() -> None:
        await make_run(store, "a", ts=T0)
        await make_run(store, "b", ts=T0 + 1)
        await make_run(store, "c", ts=T0 + 2, tenant="acme")
        await _finish(store, "a")
        assert [r.run_id for r in await store.list_runs()] == ["c", "b", "a"]
        assert [r.run_id for r in await store.list_runs(tenant=TENANT)] == ["b", "a"]
        assert [r.run_id for r in await store.list_runs(status="completed")] == ["a"]
        assert [r.run_id for r in await store.list_runs(workflow="nope")] == []
        assert len(await store.list_runs(limit=1)) == 1

    run(aio, body)


def test_worker_liveness(store: Store, aio: asyncio.Runner) -> None:
    async def body() -> None:
        w = WorkerRecord("w1", "host", 123, ["wf@1", "act"], T0, T0)
        await store.beat_worker(w)
        await store.beat_worker(WorkerRecord("w1", "host", 123, ["wf@1"], T0, T0 + 10))
        await store.beat_worker(WorkerRecord("w2", "host", 124, [], T0, T0 + 1))
        live = await store.live_workers(T0 + 5)
        assert [(x.worker_id, x.queues, x.heartbeat_at) for x in live] == [
            ("w1", ["wf@1"], T0 + 10)
        ]
        await store.remove_worker("w1")
        assert await store.live_workers(T0) == [WorkerRecord("w2", "host", 124, [], T0, T0 + 1)]

    run(aio, body)


# =============================================================================
# SQLite only
# =============================================================================


def _normalised_sql(sql: str | None) -> str | None:
    if sql is None:
        return None
    sql = re.sub(r"--[^\n]*", "", sql)
    return re.sub(r"\s+", " ", sql).replace("( ", "(").replace(" )", ")").strip()


def _schema_rows(path: Path) -> dict[tuple[str, str], tuple[str, str | None]]:
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master").fetchall()
    finally:
        conn.close()
    return {(t, n): (tbl, _normalised_sql(sql)) for t, n, tbl, sql in rows}


def test_migrations_build_the_schema_of_schema_sql(tmp_path: Path) -> None:
    migrated = tmp_path / "migrated.db"
    store = SqliteStore(f"sqlite:///{migrated}")
    asyncio.run(store.open())
    asyncio.run(store.close())

    reference = tmp_path / "reference.db"
    conn = sqlite3.connect(reference)
    conn.executescript(load_schema("sqlite"))
    conn.close()

    got = _schema_rows(migrated)
    want = _schema_rows(reference)
    bookkeeping = got.pop(("table", "waypost_migrations"))
    assert bookkeeping[0] == "waypost_migrations"
    assert want  # the reference really holds a schema
    assert {k for k in want if k[0] == "table"} >= {
        ("table", t) for t in ("runs", "events", "tasks", "timers", "workers")
    }
    assert got == want

    conn = sqlite3.connect(migrated)
    try:
        versions = [r[0] for r in conn.execute("SELECT version FROM waypost_migrations")]
        journal = conn.execute("PRAGMA journal_mode").fetchone()[0]
    finally:
        conn.close()
    assert versions == [m.version for m in load_migrations("sqlite")]
    assert journal == "wal"


def test_reopening_and_concurrent_first_opens_apply_migrations_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def open_close(together: bool = True) -> None:
        try:
            store = SqliteStore(url)
            if together:
                barrier.wait(5)
            asyncio.run(store.open())
            asyncio.run(store.close())
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=open_close) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors == []
    open_close(together=False)
    assert errors == []
    conn = sqlite3.connect(tmp_path / "shared.db")
    try:
        rows = conn.execute("SELECT version FROM waypost_migrations ORDER BY version").fetchall()
    finally:
        conn.close()
    assert [r[0] for r in rows] == [m.version for m in load_migrations("sqlite")]


def test_a_newer_schema_than_the_package_knows_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "future.db"
    url = f"sqlite:///{path}"
    store = SqliteStore(url)
    asyncio.run(store.open())
    asyncio.run(store.close())
    newest = max(m.version for m in load_migrations("sqlite"))
    conn = sqlite3.connect(path)
    conn.execute(
        "INSERT INTO waypost_migrations (version, name, applied_at) VALUES (?, 'future', 0)",
        (newest + 1,),
    )
    conn.commit()
    conn.close()
    before = _schema_rows(path)

    with pytest.raises(SchemaError, match=f"version {newest + 1}"):
        asyncio.run(SqliteStore(url).open())
    with pytest.raises(SchemaError, match="upgrade waypost"):
        wp.Engine(url)
    assert _schema_rows(path) == before


def test_a_missing_folder_is_a_clear_configuration_error(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'no' / 'such' / 'dir' / 'w.db'}"
    with pytest.raises(ConfigurationError, match=r"folder .* does not exist"):
        asyncio.run(SqliteStore(url).open())
    with pytest.raises(ConfigurationError, match="does not exist"):
        wp.Engine(url)
    assert not (tmp_path / "no").exists()


def test_a_file_that_is_not_a_database_is_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "garbage.db"
    path.write_bytes(b"this is not a SQLite database, just some bytes" * 100)
    with pytest.raises(StoreError, match=r"garbage\.db"):
        asyncio.run(SqliteStore(f"sqlite:///{path}").open())


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("sqlite:///:memory:", "names no file"),
        ("sqlite://", "names no file"),
        ("sqlite:///", "names no file"),
        ("sqlite://localhost/{tmp}/w.db", "has a host"),
        ("sqlite:///{tmp}/w.db?mode=memory", "unknown SQLite URL option.*mode"),
        ("sqlite:///{tmp}/w.db?synchronous=off", "synchronous='off' is not allowed"),
        ("sqlite:///{tmp}/w.db?busy_timeout=soon", "busy_timeout"),
        ("sqlite:///{tmp}/w.db?busy_timeout=-1", "busy_timeout"),
        ("mysql://localhost/db", "unsupported database URL"),
    ],
    ids=[
        "memory",
        "empty",
        "no-path",
        "host",
        "unknown-option",
        "bad-synchronous",
        "busy-timeout-not-a-number",
        "busy-timeout-negative",
        "other-scheme",
    ],
)
def test_bad_urls_are_refused_clearly(tmp_path: Path, url: str, message: str) -> None:
    url = url.format(tmp=tmp_path)
    with pytest.raises(ConfigurationError, match=message):
        open_store(url)
    with pytest.raises(ConfigurationError, match=message):
        wp.Engine(url)
    assert list(tmp_path.iterdir()) == []


def test_good_url_options_are_accepted(tmp_path: Path) -> None:
    store = SqliteStore(f"sqlite:///{tmp_path / 'w.db'}?synchronous=NORMAL&busy_timeout=2.5")
    assert (store.synchronous, store.busy_timeout) == ("NORMAL", 2.5)
    assert SqliteStore(f"sqlite:///{tmp_path / 'w.db'}").synchronous == "FULL"


def test_requests_queued_together_commit_as_one_batch_and_a_conflict_rolls_back_alone(
    tmp_path: Path,
) -> None:
    """Group commit, made deterministic: hold the write connection while requests queue."""

    async def body() -> None:
        store = SqliteStore(f"sqlite:///{tmp_path / 'batch.db'}")
        await store.open()
        try:
            n = 20
            heads = {}
            for i in range(n):
                created = await make_run(store, f"r{i}", owner="w1")
                heads[f"r{i}"] = (created.run.last_seq, created.run.last_hash)
            await make_run(store, "a", owner="w1")
            await schedule_activities(store, "a", activity_task("1"))
            (act,) = await claim_activities(store, "w2", now=T0)
            before_a = await state(store, "a")
            writer = store._writer
            assert writer is not None

            def commit(run_id: str) -> RunCommit:
                seq, hash_ = heads[run_id]
                return RunCommit(
                    TENANT,
                    run_id,
                    [ev(E.SIGNAL_RECEIVED, T0 + 1, name=run_id)],
                    T0 + 1,
                    expect_seq=seq,
                    expect_hash=hash_,
                    snapshot=Snapshot("waiting", [], 1),
                    workflow_fence=1,
                    workflow_op=WorkflowTaskOp.IDLE,
                )

            # Writes its activity update (deletes the task) and fails later, on the
            # workflow fence: the savepoint must undo the deletion.
            doomed = RunCommit(
                TENANT,
                "a",
                [ev(E.ACTIVITY_COMPLETED, T0 + 1, step="1", result=1)],
                T0 + 1,
                activity=ActivityUpdate("1", act.fence, ActivityTaskOp.DONE),
                workflow_fence=99,
                workflow_op=WorkflowTaskOp.IDLE,
            )
            commits_before = store.stats["commits"]
            store.conn_lock.acquire()
            try:
                plug = asyncio.ensure_future(store.commit_run(commit("r0")))
                await _until(lambda: writer.queue.qsize() == 0 and store._pending == 1)
                rest = [commit(f"r{i}") for i in range(1, n)]
                rest.insert(n // 2, doomed)
                futures = [asyncio.ensure_future(store.commit_run(c)) for c in rest]
                await _until(lambda: writer.queue.qsize() == len(rest))
            finally:
                store.conn_lock.release()
            results = await asyncio.gather(plug, *futures)
            assert store.stats["commits"] - commits_before == 2  # the plug, then one batch
            outcome = dict(zip([c.run_id for c in [commit("r0"), *rest]], results, strict=True))
            assert outcome["a"].conflict is Conflict.WORKFLOW_FENCE
            assert all(outcome[f"r{i}"].ok for i in range(n))
            assert await state(store, "a") == before_a
            for i in range(n):
                assert [e.seq for e in await store.load_history(TENANT, f"r{i}")] == [1, 2]
        finally:
            await store.close()

    asyncio.run(body())


async def _until(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        assert loop.time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.001)
