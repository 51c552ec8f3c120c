"""The store's tasks, timers and workers, tested through its Protocol against every
store (the `store` fixture of tests/integration/conftest.py): claims, leases, releases
and expiry of activity and workflow tasks, timers, runs and worker listings.

Times handed to the store are explicit (`now=`), so nothing here depends on
the wall clock.
"""

from __future__ import annotations

import asyncio

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
    schedule_activities,
)
from waypost.model.chain import verify_chain
from waypost.model.events import EventType
from waypost.store.base import (
    ActivityTaskOp,
    Conflict,
    LeaseRenewal,
    NewActivityTask,
    NewTimer,
    RunCommit,
    Snapshot,
    Store,
    TaskRef,
    WorkerRecord,
    WorkflowTaskOp,
)
from waypost.store.effects import (
    CancelActivities,
    CancelTimers,
    ScheduleActivities,
    SettleActivity,
    StartTimers,
)

E = EventType


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
        other = NewActivityTask("3", "other", {"step": "3"}, 60.0, None)
        tasks = ScheduleActivities([activity_task("1"), activity_task("2"), other])
        await store.commit_run(RunCommit(TENANT, "r1", [], now=T0, effects=(tasks,)))
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
                effects=(SettleActivity("1", t.fence, ActivityTaskOp.DONE),),
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
                effects=(
                    SettleActivity(
                        "1", t.fence, ActivityTaskOp.RETRY, T0 + 5, heartbeat_details='{"page":7}'
                    ),
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
                effects=(SettleActivity("1", t.fence, ActivityTaskOp.RETRY, T0 + 7),),
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
                effects=(CancelActivities(["1", "2"]),),
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
            effects=(StartTimers([NewTimer(step, fire_at)]),),
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
            RunCommit(
                TENANT,
                "r1",
                [ev(E.TIMER_CANCELLED, step="1")],
                T0 + 1,
                effects=(CancelTimers(["1"]),),
            )
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


def test_a_batch_of_many_timers_across_many_runs_fires_each_once(
    store: Store, aio: asyncio.Runner
) -> None:
    """Many runs with due timers, fired a batch at a time: a run with two timers gets
    both in order, cancelled timers and finished runs get nothing, a run whose workflow
    task another engine holds is only told, and every history verifies."""

    async def body() -> None:
        n = 40
        expected: dict[str, list[str]] = {}
        for i in range(n):
            run_id = f"r{i:02}"
            steps = ["a", "b"] if i % 5 == 0 else ["a"]
            await make_run(store, run_id)
            res = await store.commit_run(
                RunCommit(
                    TENANT,
                    run_id,
                    [ev(E.TIMER_STARTED, step=s, fire_at=T0 + 10 + i / 100) for s in steps],
                    T0,
                    effects=(StartTimers([NewTimer(s, T0 + 10 + i / 100) for s in steps]),),
                )
            )
            assert res.ok
            expected[run_id] = steps
        for i in range(1, n, 7):  # cancelled: no TimerFired
            run_id = f"r{i:02}"
            res = await store.commit_run(
                RunCommit(
                    TENANT,
                    run_id,
                    [ev(E.TIMER_CANCELLED, T0 + 1, step="a")],
                    T0 + 1,
                    effects=(CancelTimers(["a"]),),
                )
            )
            assert res.ok
            expected[run_id] = expected[run_id][1:]  # its "b", if it has one, still fires
        for i in range(2, n, 9):  # finished before the timer was due
            await finish_run(store, f"r{i:02}")
            expected[f"r{i:02}"] = []
        # Another engine holds r03's workflow task: the firing leaves its lease alone.
        claimed = await claim_workflows(store, "w9", now=T0 + 19, limit=n)
        held = {t.run_id: t.fence for t in claimed if t.run_id == "r03"}
        await store.release_tasks(
            "w9",
            [
                TaskRef(TENANT, t.run_id, "workflow", "", t.fence)
                for t in claimed
                if t.run_id != "r03"
            ],
            T0 + 19,
        )

        fired = []
        for _ in range(n):
            batch = await store.fire_due_timers(T0 + 20, 7, "w1", [WF_QUEUE], 30)
            if not batch:
                break
            fired += batch
        assert await store.fire_due_timers(T0 + 1000, 100, "w1", [WF_QUEUE], 30) == []
        got = sorted((t.run_id, t.step) for t in fired)
        assert got == sorted((r, s) for r, steps in expected.items() for s in steps)
        claims = {t.run_id: t.workflow_fence for t in fired if t.workflow_fence is not None}
        assert "r03" not in claims  # held by w9, which takes the events in itself
        assert len(claims) == len({r for r, steps in expected.items() if steps}) - 1

        for run_id, steps in expected.items():
            history = await store.load_history(TENANT, run_id)
            timers = [e.data["step"] for e in history if e.type == "TimerFired"]
            assert timers == steps, run_id
            assert verify_chain(history, run=(TENANT, run_id)) == []
            audit = await store.audit_run(TENANT, run_id)
            assert audit is not None and audit.problems == []
            assert (audit.last_seq, audit.last_hash) == (history[-1].seq, history[-1].hash)
            tasks = {t.kind: t for t in await store.run_tasks(TENANT, run_id)}
            if not steps:
                continue
            wt = tasks["workflow"]
            if run_id == "r03":
                assert (wt.owner, wt.fence) == ("w9", held["r03"])
            else:  # leased to the engine that fired it, once
                assert (wt.owner, wt.fence) == ("w1", claims[run_id])

    run(aio, body)


# == list_runs, workers ========================================================


def test_list_runs_filters(store: Store, aio: asyncio.Runner) -> None:
    async def body() -> None:
        await make_run(store, "a", ts=T0)
        await make_run(store, "b", ts=T0 + 1)
        await make_run(store, "c", ts=T0 + 2, tenant="acme")
        await finish_run(store, "a")
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
