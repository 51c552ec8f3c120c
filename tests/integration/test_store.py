"""The store, tested through its Protocol against a real database: creating runs and
committing their steps (appends, the chain, the snapshot, group commit).

Every test takes the `store` fixture (tests/integration/conftest.py), which is
parametrised over the store implementations: PostgreSQL, and SQLite three ways (its
default, every write through the writer thread, and commits run inline on the caller's
thread, as the engine does at low load). The tasks, timers and workers of the same
suite are in test_store_tasks.py; SQLite's own schema, migrations and URLs in
test_sqlite_store.py.

Times handed to the store are explicit (`now=`), so nothing here depends on
the wall clock.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.helpers.store_calls import (
    T0,
    TENANT,
    WF_QUEUE,
    activity_task,
    claim_activities,
    claim_workflows,
    ev,
    finish_run,
    make_run,
    run,
    state,
)
from waypost.model.chain import verify_chain
from waypost.model.events import EventType
from waypost.store.base import (
    ActivityTaskOp,
    Conflict,
    NewTimer,
    RunCommit,
    Snapshot,
    Store,
    WorkflowTaskOp,
)
from waypost.store.effects import CancelTimers, ScheduleActivities, SettleActivity, StartTimers

E = EventType


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
            effects=(
                ScheduleActivities([activity_task("1")]),
                StartTimers([NewTimer("2", T0 + 100)]),
            ),
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
        effects=(
            SettleActivity("1", activity_fence, ActivityTaskOp.DONE),
            ScheduleActivities([activity_task("3")]),
            StartTimers([NewTimer("4", T0 + 10)]),
            CancelTimers(["2"]),
        ),
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


def test_finishing_a_run_removes_its_tasks_and_timers(store: Store, aio: asyncio.Runner) -> None:
    async def body() -> None:
        await _busy_run(store)
        await finish_run(store, "r1")
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
        await finish_run(store, "r1")
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
        await finish_run(store, "r1")
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
