"""`ctx.info`: what a run's code knows about its run — its generation, who started it,
its parent — recorded when it started, so a replay sees the same."""

from __future__ import annotations

import dataclasses
import getpass
from typing import Any

import waypost as wp


@wp.workflow(name="info_child")
async def info_child(ctx: wp.WorkflowContext) -> dict[str, Any]:
    return dataclasses.asdict(ctx.info)


@wp.workflow(name="info_parent")
async def info_parent(ctx: wp.WorkflowContext, rounds: int) -> dict[str, Any]:
    if rounds > 0:
        ctx.continue_as_new(rounds - 1)
    child = await ctx.child(info_child)
    return {"own": dataclasses.asdict(ctx.info), "child": child}


def test_a_run_knows_its_generation_starter_and_parent(make_engine: Any) -> None:
    engine = make_engine(info_parent, info_child)
    with engine.running():
        run = engine.start(info_parent, 2, run_id="info-1", started_by="ann")
        got = engine.result(run.run_id, timeout=60)
        forked = engine.fork(run.run_id, reason="redo it", new_run_id="info-2")
        again = engine.result(forked.run_id, timeout=60)
    own, child = got["own"], got["child"]
    assert own == {
        "run_id": "info-1",
        "tenant": "default",
        "workflow": "info_parent",
        "version": "1",
        "generation": 3,  # two continue_as_new before it
        "started_by": "ann",
        "parent_run_id": None,
        "forked_from": None,
    }
    assert child["parent_run_id"] == "info-1"
    assert (child["workflow"], child["generation"], child["forked_from"]) == ("info_child", 1, None)
    assert child["run_id"] != "info-1"
    assert again["own"]["forked_from"] == "info-1"
    assert again["own"]["run_id"] == "info-2"


@wp.workflow(name="info_waits")
async def info_waits(ctx: wp.WorkflowContext) -> Any:
    return await ctx.wait_signal("go")


def test_a_signal_records_who_sent_it(make_engine: Any) -> None:
    engine = make_engine(info_waits)
    with engine.running():
        run = engine.start(info_waits)
        engine.signal(run.run_id, "go", 1)
        assert engine.result(run.run_id, timeout=60) == 1
    (signal,) = [ev for ev in engine.history(run.run_id) if ev.type == "SignalReceived"]
    assert signal.data["by"] == getpass.getuser()  # the embedded API's local principal
