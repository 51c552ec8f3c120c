"""A write the database refuses as it is (a value it will not store, a rule it enforces).

The refusal is real: a CHECK constraint on PostgreSQL, a trigger on SQLite, refusing any
event that carries a marker. Sending such a write again fails again, so the engine must
neither retry it without end nor lose anything: the run is suspended with the reason,
other runs go on, and once the rule is lifted, `resume` finishes the run.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest

import waypost as wp
from tests.helpers import eventually, pg_connect
from waypost.model.chain import verify_chain

MARK = "REFUSE-ME"
RULE = "refuse_marked"

calls: dict[str, int] = {}


@wp.activity
def echo(ctx: wp.ActivityContext, text: str) -> str:
    calls[text] = calls.get(text, 0) + 1
    return text


@wp.activity
def marked(ctx: wp.ActivityContext, text: str) -> str:
    calls[text] = calls.get(text, 0) + 1
    return text + MARK


@wp.workflow(name="asks_marked")
async def asks_marked(ctx: wp.WorkflowContext, text: str) -> str:
    """Its first decision (scheduling the step) is refused: the workflow task fails."""
    result: str = await ctx.run(echo, text + MARK)
    return result


@wp.workflow(name="gets_marked")
async def gets_marked(ctx: wp.WorkflowContext, text: str) -> str:
    """Its step's result is refused: recording the step fails."""
    result: str = await ctx.run(marked, text)
    return result


@wp.workflow(name="plain")
async def plain(ctx: wp.WorkflowContext, text: str) -> str:
    result: str = await ctx.run(echo, text)
    return result


def refuse_marked_events(db_url: str) -> None:
    if db_url.startswith("sqlite:///"):
        conn = sqlite3.connect(db_url.removeprefix("sqlite:///"))
        with conn:
            conn.execute(
                f"CREATE TRIGGER {RULE} BEFORE INSERT ON events "
                f"WHEN instr(NEW.data, '{MARK}') > 0 "
                "BEGIN SELECT RAISE(ABORT, 'refused by a rule of this database'); END"
            )
        conn.close()
        return
    with pg_connect(db_url, autocommit=True) as conn:
        conn.execute(
            f"ALTER TABLE events ADD CONSTRAINT {RULE} "
            f"CHECK (position('{MARK}' in data) = 0) NOT VALID"
        )


def lift_rule(db_url: str) -> None:
    if db_url.startswith("sqlite:///"):
        conn = sqlite3.connect(db_url.removeprefix("sqlite:///"))
        with conn:
            conn.execute(f"DROP TRIGGER {RULE}")
        conn.close()
        return
    with pg_connect(db_url, autocommit=True) as conn:
        conn.execute(f"ALTER TABLE events DROP CONSTRAINT {RULE}")


@pytest.fixture
def engine(make_engine: Any, db_url: str) -> wp.Engine:
    engine: wp.Engine = make_engine(asks_marked, gets_marked, plain, echo, marked)
    with pytest.raises(wp.RunNotFound):
        engine.get("nothing")  # the store is open, with its tables
    refuse_marked_events(db_url)
    calls.clear()
    return engine


def suspended(engine: wp.Engine, run_id: str) -> wp.RunInfo:
    def check() -> wp.RunInfo | None:
        info = engine.get(run_id)
        return info if info.status == "suspended" else None

    return eventually(check, f"{run_id} suspended", timeout=20)


def test_a_refused_decision_suspends_the_run_with_the_reason_and_resume_finishes_it(
    engine: wp.Engine, db_url: str
) -> None:
    with engine.running():
        run = engine.start(asks_marked, "a", run_id="refused")
        other = engine.start(plain, "b")
        assert other.result(timeout=20) == "b"  # the engine goes on
        info = suspended(engine, run.run_id)
        assert info.error is not None
        assert info.error["type"] == "ProcessingFailed"
        message = info.error["message"]
        assert message.startswith("processing the run failed 3 times in a row: StoreRejected")
        assert ("refused by a rule" in message) or (RULE in message)
        assert MARK not in message  # the database's words, not the refused row
        assert [w["kind"] for w in info.waiting_for] == ["operator"]
        history = engine.history(run.run_id)
        # Nothing of the refused decision was written: only the suspension.
        assert [e.type for e in history] == ["RunStarted", "RunSuspended"]
        assert calls == {"b": 1}
        lift_rule(db_url)
        engine.resume(run.run_id, "the rule is lifted")
        assert run.result(timeout=20) == "a" + MARK
    assert verify_chain(engine.history(run.run_id), run=("default", run.run_id)) == []


def test_a_refused_step_result_holds_the_step_and_it_runs_again_after_resume(
    engine: wp.Engine, db_url: str
) -> None:
    with engine.running():
        run = engine.start(gets_marked, "c")
        info = suspended(engine, run.run_id)
        assert info.error is not None and info.error["type"] == "ProcessingFailed"
        assert info.error["message"].startswith("recording step 1 failed 3 times in a row")
        history = engine.history(run.run_id)
        assert [e.type for e in history] == [
            "RunStarted",
            "ActivityScheduled",
            "ActivityFailed",
            "RunSuspended",
        ]
        held = history[2].data
        assert held["retrying"] is True and held["held"] == "the run is suspended"
        assert "result" not in held  # the refused result is not kept
        assert calls == {"c": 1}  # ran once; its outcome could not be recorded
        lift_rule(db_url)
        engine.resume(run.run_id, "the rule is lifted")
        assert run.result(timeout=20) == "c" + MARK
    assert calls == {"c": 2}  # at least once: the step ran again
    assert verify_chain(engine.history(run.run_id), run=("default", run.run_id)) == []


def test_a_start_the_database_refuses_is_a_clear_error_and_writes_nothing(
    engine: wp.Engine,
) -> None:
    with pytest.raises(wp.StoreRejected, match="refuse"):
        engine.start(plain, "d" + MARK, run_id="never")
    with pytest.raises(wp.RunNotFound):
        engine.get("never")
