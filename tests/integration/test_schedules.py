"""Schedules on both stores: one run per fire with three engines through daylight-saving
changes, overlap policies, catch-up after downtime, backfill, and bad input refused."""

from __future__ import annotations

import contextlib
import getpass
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import waypost as wp
from tests.helpers import db_query, eventually, of_type
from waypost.engine.faults import Crash, NoFaults
from waypost.errors import (
    InvalidRequest,
    RunNotActive,
    ScheduleExists,
    ScheduleNotFound,
    UnknownWorkflow,
)
from waypost.model.schedules import fire_run_id
from waypost.testing import TestClock

pytestmark = pytest.mark.timeout(120)


@wp.workflow(name="sched_noop")
async def noop(ctx: wp.WorkflowContext, label: str) -> str:
    return label


@wp.workflow(name="sched_gated")
async def gated(ctx: wp.WorkflowContext, label: str) -> str:
    # Held by a signal wait, not a running activity: the tests move the clock by hours,
    # which would lapse a running attempt's lease.
    await ctx.wait_signal("go")
    return label


def waiting(engine: wp.Engine, run_id: str) -> None:
    """The run reaches its signal wait: a run just started is "running" until its first
    step commits, and one cancelled never gets there."""
    eventually(lambda: engine.get(run_id).status == "waiting", f"{run_id} waiting")


def release(engine: wp.Engine, schedule_id: str) -> None:
    """Let every unfinished run of the schedule end."""
    for run_id in sched_runs(engine, schedule_id):
        if not engine.get(run_id).status.finished:
            with contextlib.suppress(RunNotActive):  # it ended meanwhile
                engine.signal(run_id, "go")


@pytest.fixture
def serving(make_engine: Any) -> Iterator[contextlib.ExitStack]:
    """Engines entered here serve until the test ends (stopped before they close)."""
    with contextlib.ExitStack() as stack:
        yield stack


def at(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def set_clock(clock: TestClock, when: float) -> None:
    clock.jump(when - clock())


def sched_runs(engine: wp.Engine, schedule_id: str) -> list[str]:
    prefix = f"sched:{schedule_id}:"
    runs = engine.list_runs(limit=1000)
    return sorted(r.run_id for r in runs if r.run_id.startswith(prefix))


# -- three engines through a daylight-saving change ---------------------------------------
SPRING = (
    "2026-03-29T00:00:00",  # 01:00 CET
    "2026-03-29T00:30:00",
    "2026-03-29T01:00:00",  # 02:00, 02:30 (skipped) and 03:00 CEST: one fire
    "2026-03-29T01:30:00",  # 03:30 CEST
    "2026-03-29T02:00:00",
)
AUTUMN = (
    "2026-10-25T00:00:00",  # 02:00 CEST
    "2026-10-25T00:30:00",  # 02:30 CEST
    # 02:00 and 02:30 CET (the repeated hour's second pass): no fire
    "2026-10-25T02:00:00",  # 03:00 CET
    "2026-10-25T02:30:00",
)


def half_hours_in_madrid(
    make_engine: Any,
    serving: contextlib.ExitStack,
    fires: tuple[str, ...],
    prefix: str,
    **options: Any,
) -> tuple[list[float], TestClock, list[wp.Engine], str, Any]:
    """Three engines on one clock, a minute before the first of `fires`, and a schedule
    (id `prefix`-random) of `noop` every half hour in Madrid, made by the first before
    they all serve; the fire times, the clock, the engines, the id and what `schedule`
    answered."""
    times = [at(f) for f in fires]
    clock = TestClock(start=times[0] - 60)
    engines = [make_engine(noop, clock=clock) for _ in range(3)]
    sid = f"{prefix}-{uuid.uuid4().hex[:6]}"
    info = engines[0].schedule(
        noop,
        id=sid,
        cron="*/30 * * * *",
        tz="Europe/Madrid",
        input="tick",
        overlap="allow_all",
        **options,
    )
    for engine in engines:
        serving.enter_context(engine.running())
    return times, clock, engines, sid, info


@pytest.mark.parametrize("fires", [SPRING, AUTUMN], ids=["spring", "autumn"])
def test_three_engines_fire_each_tick_once_through_a_dst_change(
    make_engine: Any, serving: contextlib.ExitStack, fires: tuple[str, ...]
) -> None:
    times, clock, engines, sid, info = half_hours_in_madrid(make_engine, serving, fires, "dst")
    assert info.next_fire_at == times[0]
    # walk the clock through every half hour, the repeated one included
    step = times[0]
    while step <= times[-1]:
        set_clock(clock, step + 1)
        expected = [fire_run_id(sid, t) for t in times if t <= step]
        eventually(
            lambda e=expected, s=step: (
                (engines[0].describe_schedule(sid).next_fire_at or 0) > s
                and sched_runs(engines[0], sid) == sorted(e)
            ),
            f"the fires up to {step}",
        )
        step += 1800
    runs = sched_runs(engines[0], sid)
    assert runs == sorted(fire_run_id(sid, t) for t in times)  # one run per fire, no extra
    for run_id in runs:
        assert engines[1].result(run_id, timeout=10) == "tick"


@pytest.mark.parametrize("fires", [SPRING, AUTUMN], ids=["spring", "autumn"])
def test_three_engines_catching_up_across_a_dst_change_at_once(
    make_engine: Any, serving: contextlib.ExitStack, fires: tuple[str, ...]
) -> None:
    """The clock jumps over the whole change: the three engines race on every fire."""
    times, clock, engines, sid, _ = half_hours_in_madrid(
        make_engine, serving, fires, "dst-all", catchup="all"
    )
    set_clock(clock, times[-1] + 1)
    expected = sorted(fire_run_id(sid, t) for t in times)
    eventually(lambda: sched_runs(engines[1], sid) == expected, "every fire, once")
    eventually(
        lambda: (engines[2].describe_schedule(sid).next_fire_at or 0) > times[-1], "the advance"
    )
    assert sched_runs(engines[0], sid) == expected


# -- overlap policies -------------------------------------------------------------------
def gated_at(make_engine: Any, start: str) -> tuple[TestClock, wp.Engine, str]:
    """A clock at `start`, an engine of `sched_gated` on it, and a new label."""
    clock = TestClock(start=at(start))
    return clock, make_engine(gated, clock=clock), uuid.uuid4().hex[:8]


def fire_twice(
    make_engine: Any, serving: contextlib.ExitStack, overlap: str
) -> tuple[wp.Engine, str, str, TestClock]:
    """A schedule of `sched_gated` every hour whose first run is held while it fires again."""
    clock, engine, label = gated_at(make_engine, "2026-06-01T09:59:00")
    sid = f"ov-{label}"
    engine.schedule(gated, id=sid, every=timedelta(hours=1), input=label, overlap=overlap)
    serving.enter_context(engine.running())
    set_clock(clock, at("2026-06-01T10:00:01"))
    first = fire_run_id(sid, at("2026-06-01T10:00:00"))
    eventually(lambda: sched_runs(engine, sid) == [first], "the first fire")
    set_clock(clock, at("2026-06-01T11:00:01"))
    eventually(
        lambda: engine.describe_schedule(sid).next_fire_at == at("2026-06-01T12:00:00"),
        "the second fire handled",
    )
    return engine, sid, label, clock


def test_overlap_skip(make_engine: Any, serving: contextlib.ExitStack) -> None:
    engine, sid, label, _ = fire_twice(make_engine, serving, "skip")
    assert sched_runs(engine, sid) == [fire_run_id(sid, at("2026-06-01T10:00:00"))]
    release(engine, sid)


def test_overlap_allow_all(make_engine: Any, serving: contextlib.ExitStack) -> None:
    engine, sid, label, _ = fire_twice(make_engine, serving, "allow_all")
    assert len(sched_runs(engine, sid)) == 2
    release(engine, sid)


def test_overlap_buffer_one_starts_the_buffered_fire_when_the_run_ends(
    make_engine: Any, serving: contextlib.ExitStack
) -> None:
    engine, sid, label, clock = fire_twice(make_engine, serving, "buffer_one")
    info = engine.describe_schedule(sid)
    first = engine.get(fire_run_id(sid, at("2026-06-01T10:00:00")))
    assert not first.status.finished, (first, engine.history(first.run_id))
    assert info.buffered_fire_at == at("2026-06-01T11:00:00")
    assert len(sched_runs(engine, sid)) == 1
    release(engine, sid)
    second = fire_run_id(sid, at("2026-06-01T11:00:00"))
    eventually(lambda: second in sched_runs(engine, sid), "the buffered fire")
    release(engine, sid)
    assert engine.result(second, timeout=10) == label
    assert engine.describe_schedule(sid).buffered_fire_at is None


def test_overlap_cancel_previous(make_engine: Any, serving: contextlib.ExitStack) -> None:
    engine, sid, label, _ = fire_twice(make_engine, serving, "cancel_previous")
    first = fire_run_id(sid, at("2026-06-01T10:00:00"))
    asked = of_type(engine.history(first), "CancelRequested")
    assert asked and "fired again" in asked[0].data["reason"]
    assert len(sched_runs(engine, sid)) == 2
    release(engine, sid)


# -- catch-up after downtime, and backfill -------------------------------------------------
@pytest.mark.parametrize(
    ("catchup", "expected"),
    [("none", []), ("last", ["05:00"]), ("all", ["03:00", "04:00", "05:00"])],
    ids=["none", "last", "all"],
)
def test_catch_up_after_downtime(
    make_engine: Any, serving: contextlib.ExitStack, catchup: str, expected: list[str]
) -> None:
    clock = TestClock(start=at("2026-06-01T00:59:00"))
    engine = make_engine(noop, clock=clock)
    sid = f"cu-{catchup}-{uuid.uuid4().hex[:6]}"
    engine.schedule(
        noop,
        id=sid,
        every=timedelta(hours=1),
        input="x",
        catchup=catchup,
        catchup_window=timedelta(hours=2, minutes=30),
        overlap="allow_all",
    )
    # no engine serves from 01:00 to 05:20: the 01:00 .. 05:00 fires are missed
    set_clock(clock, at("2026-06-01T05:20:00"))
    serving.enter_context(engine.running())
    eventually(
        lambda: engine.describe_schedule(sid).next_fire_at == at("2026-06-01T06:00:00"),
        "the catch-up",
    )
    want = [fire_run_id(sid, at(f"2026-06-01T{hm}:00")) for hm in expected]
    assert sched_runs(engine, sid) == sorted(want)


def test_backfill_starts_each_fire_of_the_range_once(make_engine: Any) -> None:
    clock = TestClock(start=at("2026-06-10T12:00:00"))
    engine = make_engine(noop, clock=clock)
    sid = f"bf-{uuid.uuid4().hex[:6]}"
    engine.schedule(noop, id=sid, cron="0 9 * * MON-FRI", tz="Europe/Madrid", input="b")
    done = engine.backfill_schedule(sid, "2026-06-01T00:00:00Z", "2026-06-07T23:59:59Z")
    # Mon 1 .. Fri 5 June at 09:00 Madrid (07:00 UTC); the weekend has none
    assert [f for f, _ in done.fires] == [f"2026-06-0{d}T07:00:00Z" for d in range(1, 6)]
    assert all(run is not None for _, run in done.fires)
    again = engine.backfill_schedule(sid, "2026-06-01T00:00:00Z", "2026-06-07T23:59:59Z")
    assert again.fires == done.fires  # the same runs, found again
    assert len(sched_runs(engine, sid)) == 5
    with engine.running():
        for _, run in done.fires:
            assert run is not None and engine.result(run, timeout=10) == "b"


# -- the operations and bad input -------------------------------------------------------------
def test_pause_resume_delete_list(make_engine: Any, serving: contextlib.ExitStack) -> None:
    clock = TestClock(start=at("2026-06-01T09:59:00"))
    engine = make_engine(noop, clock=clock)
    engine.schedule(noop, id="a", every=3600, input=1)
    engine.schedule("sched_noop", id="b", cron="0 * * * *", input=2)
    assert [s.schedule_id for s in engine.schedules()] == ["a", "b"]
    assert engine.pause_schedule("a").paused
    serving.enter_context(engine.running())
    set_clock(clock, at("2026-06-01T10:00:01"))
    eventually(lambda: sched_runs(engine, "b"), "b fires")
    assert engine.describe_schedule("a").next_fire_at == at("2026-06-01T10:00:00")
    assert sched_runs(engine, "a") == []  # paused: no fire
    set_clock(clock, at("2026-06-01T10:30:00"))
    resumed = engine.resume_schedule("a")
    assert not resumed.paused and resumed.next_fire_at == at("2026-06-01T11:00:00")
    engine.delete_schedule("b")
    assert [s.schedule_id for s in engine.schedules()] == ["a"]
    with pytest.raises(ScheduleNotFound):
        engine.describe_schedule("b")
    with pytest.raises(ScheduleNotFound):
        engine.describe_schedule("a", tenant="other")  # another tenant's schedule
    with pytest.raises(ScheduleNotFound):
        engine.delete_schedule("a", tenant="other")
    with pytest.raises(ScheduleExists):
        engine.schedule(noop, id="a", every=60)


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"cron": "61 * * * *"}, "cron"),
        ({"cron": "0 9 * *"}, "cron"),
        ({"cron": "0 9 * * *\n"}, "cron"),
        ({"cron": "0 0 31 2 *"}, "cron"),
        ({"cron": "0 9 * * *", "tz": "Europe/Nowhere"}, "tz"),
        ({"cron": "0 9 * * *", "tz": "../../etc/passwd"}, "tz"),
        ({"every": 0}, "every"),
        ({"every": 60, "cron": "* * * * *"}, "cron"),
        ({}, "cron"),
        ({"every": 60, "overlap": "sometimes"}, "overlap"),
        ({"every": 60, "catchup": "maybe"}, "catchup"),
        ({"every": 60, "id": ""}, "schedule_id"),
        ({"every": 60, "id": "x" * 121}, "schedule_id"),
        ({"every": 60, "id": "a\x00b"}, "schedule_id"),
    ],
    ids=lambda v: str(v)[:30],
)
def test_bad_input_is_a_located_error_that_writes_nothing(
    make_engine: Any, options: dict[str, Any], field: str
) -> None:
    engine = make_engine(noop)
    options = {"id": "bad", **options}
    with pytest.raises(InvalidRequest) as refused:
        engine.schedule(noop, **options)
    assert refused.value.field == field
    assert engine.schedules() == []


def test_unknown_workflow_is_refused(make_engine: Any) -> None:
    engine = make_engine(noop)
    with pytest.raises(UnknownWorkflow, match="nowhere"):
        engine.schedule("nowhere", id="x", every=60)
    assert engine.schedules() == []


class CrashAfterStart(NoFaults):
    """Dies as a process would once a fire's runs are started, before the row advances."""

    def hit(self, point: str) -> None:
        if point == "schedules:started":
            raise Crash("killed between the start and the advance")


def test_an_engine_dying_between_start_and_advance_loses_nothing_and_doubles_nothing(
    make_engine: Any, serving: contextlib.ExitStack
) -> None:
    clock = TestClock(start=at("2026-06-01T09:59:00"))
    doomed = make_engine(noop, clock=clock, faults=CrashAfterStart())
    sid = f"crash-{uuid.uuid4().hex[:6]}"
    doomed.schedule(noop, id=sid, every=timedelta(hours=1), input="c")
    set_clock(clock, at("2026-06-01T10:00:01"))
    serving.enter_context(doomed.running())
    run_id = fire_run_id(sid, at("2026-06-01T10:00:00"))
    eventually(lambda: sched_runs(doomed, sid) == [run_id], "the doomed engine's start")
    # its loop died before the advance: the fire is still due
    assert doomed.describe_schedule(sid).next_fire_at == at("2026-06-01T10:00:00")
    survivor = make_engine(noop, clock=clock)
    serving.enter_context(survivor.running())
    eventually(
        lambda: survivor.describe_schedule(sid).next_fire_at == at("2026-06-01T11:00:00"),
        "the survivor's advance",
    )
    assert sched_runs(survivor, sid) == [run_id]  # found again, not started twice
    assert survivor.describe_schedule(sid).last_run_id == run_id
    assert survivor.result(run_id, timeout=10) == "c"


def test_a_schedules_input_is_encrypted_at_rest(make_engine: Any, db_url: str) -> None:
    keys = wp.Keys({"k1": b"k" * 32})
    engine = make_engine(noop, encryption=keys)
    engine.schedule(noop, id="secret", every=60, input="the-plaintext-secret")
    rows = db_query(db_url, "SELECT input FROM schedules")
    assert len(rows) == 1 and "the-plaintext-secret" not in str(rows[0][0])
    assert engine.describe_schedule("secret").input == "the-plaintext-secret"
    with engine.running():
        done = engine.backfill_schedule("secret", 0, 0)
        run_id = done.fires[0][1]
        assert run_id is not None and engine.result(run_id, timeout=10) == "the-plaintext-secret"


KILLED_WORKER = """
import os, signal, sys, time
import waypost as wp
from waypost.engine.faults import NoFaults
from waypost.testing import TestClock

class KillAfterStart(NoFaults):
    def hit(self, point):
        if point == "schedules:started":
            os.kill(os.getpid(), signal.SIGKILL)

@wp.workflow(name="sched_noop")
async def noop(ctx, label):
    return label

clock = TestClock(start=float(sys.argv[2]))
with wp.Engine(sys.argv[1], clock=clock, faults=KillAfterStart(), poll_interval=0.05) as engine:
    engine.register(noop)
    with engine.running():
        time.sleep(60)
"""


def test_a_process_killed_between_start_and_advance(
    make_engine: Any, serving: contextlib.ExitStack, db_url: str, tmp_path: Path
) -> None:
    fire = at("2026-06-01T10:00:00")
    clock = TestClock(start=fire - 60)
    engine = make_engine(noop, clock=clock)
    sid = f"kill-{uuid.uuid4().hex[:6]}"
    engine.schedule(noop, id=sid, every=timedelta(hours=1), input="k")
    script = tmp_path / "killed_worker.py"
    script.write_text(KILLED_WORKER)
    worker = subprocess.run(
        [sys.executable, str(script), db_url, str(fire + 1)],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert worker.returncode == -signal.SIGKILL, worker.stderr
    run_id = fire_run_id(sid, fire)
    assert sched_runs(engine, sid) == [run_id]  # started, then the process died ...
    assert engine.describe_schedule(sid).next_fire_at == fire  # ... before the advance
    set_clock(clock, fire + 2)
    serving.enter_context(engine.running())
    eventually(lambda: engine.describe_schedule(sid).next_fire_at == fire + 3600, "the take-over")
    assert sched_runs(engine, sid) == [run_id]
    assert engine.result(run_id, timeout=20) == "k"


def test_a_backfill_with_the_schedules_overlap_policy(
    make_engine: Any, serving: contextlib.ExitStack
) -> None:
    clock, engine, label = gated_at(make_engine, "2026-06-10T12:00:00")
    sid = f"bfs-{label}"
    engine.schedule(gated, id=sid, every=timedelta(hours=1), input=label, overlap="skip")
    serving.enter_context(engine.running())
    done = engine.backfill_schedule(
        sid, "2026-06-01T00:00:00Z", "2026-06-01T02:00:00Z", overlap="schedule"
    )
    # the first fire's run is still running (held): the next two are skipped
    first = fire_run_id(sid, at("2026-06-01T00:00:00"))
    assert done.fires == [
        ("2026-06-01T00:00:00Z", first),
        ("2026-06-01T01:00:00Z", None),
        ("2026-06-01T02:00:00Z", None),
    ]
    assert sched_runs(engine, sid) == [first]
    release(engine, sid)
    assert engine.result(first, timeout=10) == label


def test_a_backfill_and_the_regular_fires_do_not_see_each_others_runs(
    make_engine: Any, serving: contextlib.ExitStack
) -> None:
    clock, engine, label = gated_at(make_engine, "2026-06-10T11:59:00")
    skip, cancel = f"bo-skip-{label}", f"bo-cancel-{label}"
    for sid, policy in ((skip, "skip"), (cancel, "cancel_previous")):
        engine.schedule(gated, id=sid, every=timedelta(hours=1), input=label, overlap=policy)
    serving.enter_context(engine.running())
    old = [at("2026-06-01T00:00:00"), at("2026-06-01T01:00:00")]
    for sid in (skip, cancel):
        done = engine.backfill_schedule(sid, "2026-06-01T00:00:00Z", "2026-06-01T01:00:00Z")
        assert [run for _, run in done.fires] == [fire_run_id(sid, t) for t in old]
        assert engine.describe_schedule(sid).last_run_id is None  # the row is the fires'
    # The regular fire: the backfilled runs still run, yet "skip" starts it and
    # "cancel_previous" cancels none of them.
    set_clock(clock, at("2026-06-10T12:00:01"))
    noon = at("2026-06-10T12:00:00")
    for sid in (skip, cancel):
        eventually(
            lambda sid=sid: engine.describe_schedule(sid).last_run_id == fire_run_id(sid, noon),
            f"{sid}'s noon fire",
        )
        for t in old:
            waiting(engine, fire_run_id(sid, t))
    # A backfill's own policy between its own runs; the running noon run does not count.
    skipped = engine.backfill_schedule(
        skip, "2026-06-02T00:00:00Z", "2026-06-02T01:00:00Z", overlap="skip"
    )
    assert skipped.fires == [
        ("2026-06-02T00:00:00Z", fire_run_id(skip, at("2026-06-02T00:00:00"))),
        ("2026-06-02T01:00:00Z", None),
    ]
    replaced = engine.backfill_schedule(
        cancel, "2026-06-02T00:00:00Z", "2026-06-02T01:00:00Z", overlap="cancel_previous"
    )
    first, second = (run for _, run in replaced.fires)
    assert first is not None and second is not None
    eventually(lambda: engine.get(first).status == "cancelled", "the backfill's first run")
    waiting(engine, second)
    waiting(engine, fire_run_id(cancel, noon))
    for sid in (skip, cancel):
        assert engine.describe_schedule(sid).last_run_id == fire_run_id(sid, noon)
    with pytest.raises(InvalidRequest, match="does not wait") as refused:
        engine.backfill_schedule(
            skip, "2026-06-03T00:00:00Z", "2026-06-03T01:00:00Z", overlap="buffer_one"
        )
    assert refused.value.field == "overlap"
    for sid in (skip, cancel):
        release(engine, sid)


NIGHTLY = """
name: nightly
start: done
steps:
  done: {type: succeed}
"""


def test_a_schedule_of_a_published_definition_fires(
    make_engine: Any, serving: contextlib.ExitStack
) -> None:
    clock = TestClock(start=at("2026-06-01T09:59:00"))
    engine = make_engine(clock=clock)
    engine.publish(NIGHTLY, tenant="acme")
    engine.schedule("nightly", id="n", cron="0 10 * * *", input={"x": 1}, tenant="acme")
    with pytest.raises(UnknownWorkflow):  # another tenant has no such definition
        engine.schedule("nightly", id="n", cron="0 10 * * *", tenant="other")
    serving.enter_context(engine.running())
    set_clock(clock, at("2026-06-01T10:00:01"))
    run_id = fire_run_id("n", at("2026-06-01T10:00:00"))
    eventually(lambda: engine.list_runs(tenant="acme"), "the definition's run")
    assert engine.result(run_id, timeout=10, tenant="acme") is not None
    assert engine.get(run_id, tenant="acme").workflow == "nightly"
    assert engine.schedules(tenant="other") == []


# -- trigger now --------------------------------------------------------------------------
def test_trigger_starts_a_run_now_through_the_overlap_policy(
    make_engine: Any, serving: contextlib.ExitStack
) -> None:
    engine, sid, label, clock = fire_twice(make_engine, serving, "skip")
    first = fire_run_id(sid, at("2026-06-01T10:00:00"))
    # The regular fire's run is held: the schedule's policy (skip) skips the trigger...
    skipped = engine.trigger_schedule(sid)
    assert [run for _, run in skipped.fires] == [None]
    assert sched_runs(engine, sid) == [first]
    # ...another policy, named for this trigger, starts it at once, on the asker's behalf.
    now = clock()
    ((fired_at, run),) = engine.trigger_schedule(sid, overlap="allow_all").fires
    assert run == fire_run_id(sid, datetime.fromisoformat(fired_at).timestamp())
    assert int(now) <= datetime.fromisoformat(fired_at).timestamp() < now + 60  # to the second
    assert sorted(sched_runs(engine, sid)) == sorted([first, run])
    started = of_type(engine.history(run), "RunStarted")[0].data
    assert started["started_by"] == getpass.getuser()  # the asker: this process's user
    # The regular fires go on as they were: the triggered run is not their last.
    assert engine.describe_schedule(sid).last_run_id == first
    with pytest.raises(InvalidRequest, match="a trigger's overlap is one of"):
        engine.trigger_schedule(sid, overlap="buffer_one")
    with pytest.raises(ScheduleNotFound):
        engine.trigger_schedule(sid, tenant="other")  # another tenant's schedule
    release(engine, sid)
    assert engine.result(run, timeout=10) == label
