"""Continue-as-new on both stores: a run goes on as a new generation with a bounded history."""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta
from typing import Any

import pytest

import waypost as wp
from tests.helpers import db_query, eventually, of_type

pytestmark = pytest.mark.timeout(120)

_lock = threading.Lock()
keys: dict[str, list[tuple[int, str]]] = {}


@wp.activity
def tick(ctx: wp.ActivityContext, label: str, i: int) -> int:
    with _lock:
        keys.setdefault(label, []).append((i, ctx.idempotency_key))
    return i


@wp.workflow(name="can_counter")
async def counter(ctx: wp.WorkflowContext, state: dict[str, Any]) -> dict[str, Any]:
    """Counts to `until` with one activity per iteration, `every` iterations a generation."""
    i = state["i"]
    for _ in range(state["every"]):
        if i >= state["until"]:
            return {"i": i, "generations": state.get("generations", 1)}
        i = await ctx.run(tick, state["label"], i) + 1
    ctx.continue_as_new({**state, "i": i, "generations": state.get("generations", 1) + 1})


@wp.workflow(name="can_inbox")
async def inbox(ctx: wp.WorkflowContext, state: dict[str, Any]) -> list[Any]:
    """Takes signals one a generation until it has `until` of them."""
    got = [*state["got"], await ctx.wait_signal("item")]
    if len(got) >= state["until"]:
        return got
    ctx.continue_as_new({"got": got, "until": state["until"]})


@wp.workflow(name="can_swallower")
async def swallower(ctx: wp.WorkflowContext, n: int) -> str:
    """Catches every Exception: continue-as-new still ends the generation."""
    try:
        if n < 3:
            ctx.continue_as_new(n + 1)
    except Exception:
        return "swallowed"
    return f"done at {n}"


@wp.workflow(name="can_sleeper")
async def sleeper(ctx: wp.WorkflowContext, n: int) -> int:
    await ctx.sleep(timedelta(hours=1))
    ctx.continue_as_new(n + 1)


@wp.workflow(name="can_bad_input")
async def bad_input(ctx: wp.WorkflowContext, n: int) -> int:
    if n == 0:
        ctx.continue_as_new(1)
    ctx.continue_as_new({"not json": object()})


def test_an_input_the_codec_cannot_encode_suspends_the_run_with_a_payload_error(
    make_engine: Any,
) -> None:
    # A value the codec cannot store is a bug in the code (as for a result): the run is
    # suspended, to be fixed and resumed, not failed for good.
    engine = make_engine(bad_input)
    with engine.running():
        run = engine.start(bad_input, 0)
        info = eventually(
            lambda: (i := engine.get(run.run_id)).status == "suspended" and i, "suspended"
        )
        assert info.error is not None and info.error["type"] == "PayloadError"
        assert "continue as new" in info.error["message"]
        history = engine.history(run.run_id)
    assert history[0].data["generation"] == 2  # the first continuation went through
    assert [e.type for e in history][-1] == "RunSuspended"


@wp.workflow(name="can_grower")
async def grower(ctx: wp.WorkflowContext, state: dict[str, Any]) -> int:
    """Continues once with an input of `size` bytes' worth of text."""
    if state["generation"] >= 2:
        return len(state["blob"])
    ctx.continue_as_new({"generation": 2, "blob": "x" * state["size"]})


def test_an_input_over_max_payload_bytes_suspends_the_run_as_a_bug_and_writes_nothing_of_the_next_generation(
    make_engine: Any, db_url: str
) -> None:
    # A start's input is held to the tenant's max_payload_bytes; so is the input a run
    # gives its next generation. Over it, the code's decision is a bug: the run is
    # suspended with the quota and the size, its generation as it was. A raised quota and
    # a resume take it on.
    engine = make_engine(grower, limits=wp.Limits(max_payload_bytes=2_000))
    engine.create_tenant("acme")
    with engine.running():
        # The tenant's Limits apply when no quota is set (one setting, as for a start).
        small = engine.start(grower, {"generation": 1, "size": 5_000})
        # A quota, set, wins over the Limits: acme's 10,000 bytes let 5,000 through...
        engine.set_quotas("acme", {"max_payload_bytes": 10_000})
        roomy = engine.start(grower, {"generation": 1, "size": 5_000}, tenant="acme")
        assert engine.result(roomy.run_id, timeout=30, tenant="acme") == 5_000
        # ...and its 1,000 bytes stop 1,500.
        engine.set_quotas("acme", {"max_payload_bytes": 1_000})
        tight = engine.start(grower, {"generation": 1, "size": 1_500}, tenant="acme")
        for run_id, tenant, most in (
            (small.run_id, "default", 2_000),
            (tight.run_id, "acme", 1_000),
        ):
            info = eventually(
                lambda r=run_id, t=tenant: (
                    (i := engine.get(r, tenant=t)).status == "suspended" and i
                ),
                "suspended",
            )
            assert info.error is not None
            assert info.error["type"] == "QuotaExceeded" and info.error["bug"] is True
            assert info.error["quota"] == "max_payload_bytes" and info.error["most"] == most
            size = info.error["size"]
            assert size > most
            assert "max_payload_bytes" in info.error["message"]
            assert f"{size} bytes" in info.error["message"]
            assert "max_payload_bytes" in info.waiting_for[0]["detail"]
            history = engine.history(run_id, tenant=tenant)
            # Nothing of the next generation: still generation 1, no continuation recorded.
            assert history[0].data.get("generation", 1) == 1
            assert [e.type for e in history] == ["RunStarted", "RunSuspended"]
            rows = db_query(
                db_url,
                "SELECT count(*) FROM events WHERE tenant = ? AND run_id = ?",
                (tenant, run_id),
            )
            assert rows[0][0] == 2
        # Another tenant's and the other runs went on meanwhile; a raised quota and a
        # resume take the run on.
        engine.set_quotas("acme", {"max_payload_bytes": 10_000})
        engine.resume(tight.run_id, "the quota is raised", tenant="acme")
        assert engine.result(tight.run_id, timeout=30, tenant="acme") == 1_500
    history = engine.history(tight.run_id, tenant="acme")
    assert history[0].data["generation"] == 2


@pytest.mark.parametrize("cache_size", [1000, 0])
def test_a_looping_run_keeps_its_id_and_a_bounded_history(
    make_engine: Any, db_url: str, cache_size: int
) -> None:
    label = uuid.uuid4().hex
    engine = make_engine(counter, tick, cache_size=cache_size)
    with engine.running():
        run = engine.start(counter, {"i": 0, "every": 5, "until": 42, "label": label})
        assert engine.result(run.run_id, timeout=60) == {"i": 42, "generations": 9}
        history = engine.history(run.run_id)
    # Only the last generation's history is kept: RunStarted, two steps, the end.
    assert [e.type for e in history] == [
        "RunStarted",
        *["ActivityScheduled", "ActivityCompleted"] * 2,
        "RunCompleted",
    ]
    first = history[0]
    assert first.data["generation"] == 9 and first.data["input"]["i"] == 40
    link = first.data["continued_from"]
    # The generation before had RunStarted, five steps and RunContinuedAsNew.
    assert link["generation"] == 8 and link["last_seq"] == 12 and link["last_hash"]
    assert history[1].data["step"] == "9/1"
    assert engine.verify(run.run_id) == []
    assert _count(db_url, "events", run.run_id) == len(history)
    # Every iteration ran once, and no two generations share an idempotency key.
    done = sorted(keys[label])
    assert [i for i, _ in done] == list(range(42))
    assert len({k for _, k in done}) == 42
    # Nothing of the ended generations is left behind.
    assert _count(db_url, "tasks", run.run_id) == 0
    assert _count(db_url, "timers", run.run_id) == 0


def test_signals_reach_the_generation_that_takes_them(make_engine: Any) -> None:
    """Signals sent while the run goes from one generation to the next are not lost:
    those the ended generation had not taken in are handed to the next one."""
    engine = make_engine(inbox)
    with engine.running():
        run = engine.start(inbox, {"got": [], "until": 6}, run_id="inbox-1")
        for n in range(6):
            engine.signal(run.run_id, "item", n)
        assert engine.result(run.run_id, timeout=60) == list(range(6))
        history = engine.history(run.run_id)
    assert history[0].data["generation"] == 6
    assert len(history) <= 6  # RunStarted, the signals it inherited, the end


def test_an_exception_handler_does_not_stop_a_continuation(make_engine: Any) -> None:
    engine = make_engine(swallower)
    with engine.running():
        run = engine.start(swallower, 0)
        assert engine.result(run.run_id, timeout=30) == "done at 3"
        assert engine.history(run.run_id)[0].data["generation"] == 4


def test_a_run_cancelled_while_it_continues_ends_cancelled(make_engine: Any) -> None:
    engine = make_engine(sleeper)
    with engine.running():
        run = engine.start(sleeper, 0)
        eventually(lambda: engine.get(run.run_id).status == "waiting", "the run sleeps")
        engine.cancel(run.run_id, "stop the loop")
        eventually(lambda: engine.get(run.run_id).status == "cancelled", "the run ends")
        history = engine.history(run.run_id)
    assert history[0].data.get("generation", 1) == 1
    assert not of_type(history, "RunContinuedAsNew")


def test_the_next_generation_is_taken_up_by_another_engine(make_engine: Any) -> None:
    """An engine that does not serve the workflow ends nothing: the engine that claims the
    workflow task runs each generation, and a second engine may take over between them."""
    label = uuid.uuid4().hex
    first = make_engine(counter, tick)
    second = make_engine(counter, tick)
    with first.running(), second.running():
        run = first.start(counter, {"i": 0, "every": 2, "until": 10, "label": label})
        assert second.result(run.run_id, timeout=60) == {"i": 10, "generations": 6}
    assert sorted(i for i, _ in keys[label]) == list(range(10))


observed: dict[str, list[int]] = {}


@wp.activity
def measure(ctx: wp.ActivityContext, db_url: str, run_id: str, i: int) -> int:
    """One iteration: reads how many events the database holds for the run."""
    stored = _count(db_url, "events", run_id)
    with _lock:
        observed.setdefault(run_id, []).append(stored)
    return i + 1


@wp.workflow(name="can_forever")
async def forever(ctx: wp.WorkflowContext, state: dict[str, Any]) -> int:
    i = state["i"]
    for _ in range(20):
        if i == state["until"]:
            return i
        i = await ctx.run(measure, state["db"], ctx.run_id, i)
    ctx.continue_as_new({**state, "i": i})


def test_300_iterations_keep_the_stored_history_bounded(make_engine: Any, db_url: str) -> None:
    """The events stored for a looping run never pass one generation's worth, whatever
    the number of iterations (bench/long_lived.py measures 10,000)."""
    engine = make_engine(forever, measure)
    run_id = f"forever-{uuid.uuid4().hex[:8]}"
    with engine.running():
        engine.start(forever, {"i": 0, "until": 300, "db": db_url}, run_id=run_id)
        assert engine.result(run_id, timeout=120) == 300
    seen = observed[run_id]
    assert len(seen) == 300
    # RunStarted plus 20 steps of two events, read while the 20th runs: at most 40.
    assert max(seen) <= 1 + 2 * 19 + 1
    assert seen[-1] == seen[19]  # the last generation holds what the first did
    total = db_query(db_url, "SELECT count(*) FROM events")
    assert total[0][0] == len(engine.history(run_id)) <= 2 + 2 * 20


def _count(db_url: str, table: str, run_id: str) -> int:
    mark = "?" if db_url.startswith("sqlite") else "%s"
    rows = db_query(db_url, f"SELECT count(*) FROM {table} WHERE run_id = {mark}", (run_id,))
    return int(rows[0][0])
