"""Several versions of one workflow side by side: which version a run takes, and that it
keeps it for its whole life."""

from __future__ import annotations

from typing import Any

import pytest

import waypost as wp
from tests.helpers import db_query, eventually
from waypost.runtime.registry import version_key


def waits_for_signal(engine: wp.Engine, run_id: str, name: str) -> bool:
    return {"kind": "signal", "name": name} in engine.get(run_id).waiting_for


@wp.activity
def inc(ctx: wp.ActivityContext, x: int) -> int:
    return x + 1


# Each version has a different shape, so replaying a run on the wrong one cannot pass
# unnoticed: it would be non-determinism (a suspended run) or a wrong result.


@wp.workflow(name="pricing", version="1")
async def pricing_v1(ctx: wp.WorkflowContext, x: int) -> str:
    await ctx.wait_signal("go")
    return f"v1:{await ctx.run(inc, x)}"


@wp.workflow(name="pricing", version="2")
async def pricing_v2(ctx: wp.WorkflowContext, x: int) -> str:
    y = await ctx.run(inc, x)
    await ctx.wait_signal("go")
    return f"v2:{await ctx.run(inc, y)}"


@wp.workflow(name="pricing", version="10")
async def pricing_v10(ctx: wp.WorkflowContext, x: int) -> str:
    await ctx.sleep(0.01)
    y = await ctx.run(inc, x)
    await ctx.wait_signal("go")
    z = await ctx.run(inc, y)
    return f"v10:{await ctx.run(inc, z)}"


ALL = (pricing_v1, pricing_v2, pricing_v10, inc)


def test_versions_order_naturally() -> None:
    assert sorted(["10", "2", "1"], key=version_key) == ["1", "2", "10"]
    assert sorted(["1.10", "1.9", "1.2.3"], key=version_key) == ["1.2.3", "1.9", "1.10"]
    assert max(["2024-01-02", "2024-01-10", "2023-12-31"], key=version_key) == "2024-01-10"
    assert version_key("2") < version_key("10")


def test_new_runs_take_the_newest_version_unless_one_is_given(make_engine: Any) -> None:
    # Registered out of order on purpose: the newest is "10", not the last registered.
    engine = make_engine(pricing_v10, pricing_v1, pricing_v2, inc)
    newest = engine.start("pricing", 1, run_id="newest")
    by_name = engine.start("pricing", 1, run_id="by-name", version="2")
    by_function = engine.start(pricing_v1, 1, run_id="by-function")
    by_override = engine.start(pricing_v1, 1, run_id="by-override", version="10")
    assert engine.get(newest.run_id).version == "10"
    assert engine.get(by_name.run_id).version == "2"
    assert engine.get(by_function.run_id).version == "1"
    assert engine.get(by_override.run_id).version == "10"
    started = engine.history("by-name")[0]
    assert started.data["workflow"] == "pricing"
    assert started.data["version"] == "2"
    with pytest.raises(wp.UnknownWorkflow, match=r"no version '3'.*1, 2, 10"):
        engine.start("pricing", 1, version="3")


@pytest.mark.parametrize("cache_size", [0, 1000], ids=["replay-every-step", "cached"])
def test_each_run_replays_on_the_version_it_started_with(make_engine: Any, cache_size: int) -> None:
    engine = make_engine(*ALL, cache_size=cache_size)
    runs = {"1": "run-v1", "2": "run-v2", "10": "run-v10"}
    with engine.running():
        for version, run_id in runs.items():
            engine.start("pricing", 10, run_id=run_id, version=version)
        for run_id in runs.values():
            eventually(lambda r=run_id: waits_for_signal(engine, r, "go"), what=f"{run_id} wait")
        for run_id in runs.values():
            engine.signal(run_id, "go")
        results = {v: engine.result(r, timeout=10) for v, r in runs.items()}
    assert results == {"1": "v1:11", "2": "v2:12", "10": "v10:13"}
    for version, run_id in runs.items():
        info = engine.get(run_id)
        assert info.version == version
        assert info.status == wp.RunStatus.COMPLETED
        history = engine.history(run_id)
        assert not [e for e in history if e.type == "RunSuspended"]


def test_a_run_keeps_its_version_when_a_newer_one_is_deployed(make_engine: Any) -> None:
    old_deploy = make_engine(pricing_v1, pricing_v2, inc)
    with old_deploy.running():
        old = old_deploy.start("pricing", 5, run_id="before-deploy")
        eventually(lambda: waits_for_signal(old_deploy, old.run_id, "go"), what="'go' wait")
    assert old_deploy.get(old.run_id).version == "2"

    new_deploy = make_engine(*ALL, cache_size=0)
    with new_deploy.running():
        new = new_deploy.start("pricing", 5, run_id="after-deploy")
        new_deploy.signal(old.run_id, "go")
        eventually(lambda: waits_for_signal(new_deploy, new.run_id, "go"), what="'go' wait")
        new_deploy.signal(new.run_id, "go")
        assert new_deploy.result(old.run_id, timeout=10) == "v2:7"
        assert new_deploy.result(new.run_id, timeout=10) == "v10:8"
    assert new_deploy.get(new.run_id).version == "10"


def test_a_run_of_an_unregistered_version_waits_for_code_then_completes(
    make_engine: Any,
) -> None:
    starter = make_engine(*ALL)  # knows version 10 but does not run workers
    run = starter.start("pricing", 0, run_id="needs-v10")
    assert starter.get(run.run_id).version == "10"

    old_worker = make_engine(pricing_v1, pricing_v2, inc)
    with old_worker.running():
        info = eventually(
            lambda: (i := old_worker.get(run.run_id)).waiting_for and i, what="waiting_for"
        )
        code = [w for w in info.waiting_for if w["kind"] == "code"]
        assert len(code) == 1
        assert "'pricing'" in code[0]["detail"]
        assert "'10'" in code[0]["detail"]
        assert info.status == wp.RunStatus.RUNNING
        # Its workflow task is queued for version 10, which this worker does not claim.
        query = "SELECT queue, state, owner FROM tasks WHERE run_id = ? AND kind = 'workflow'"
        assert db_query(old_worker.url, query, (run.run_id,)) == [("pricing@10", "ready", None)]
        assert [e.type for e in old_worker.history(run.run_id)] == ["RunStarted"]
        # Listing shows it too.
        listed = {r.run_id: r for r in old_worker.list_runs()}
        assert any(w["kind"] == "code" for w in listed[run.run_id].waiting_for)

        new_worker = make_engine(*ALL)
        with new_worker.running():
            eventually(
                lambda: waits_for_signal(new_worker, run.run_id, "go"), what="v10 picks it up"
            )
            # A worker that serves the version is alive now: no "code" entry any more.
            eventually(
                lambda: (
                    not [w for w in old_worker.get(run.run_id).waiting_for if w["kind"] == "code"]
                ),
                what="the 'code' entry to go",
            )
            new_worker.signal(run.run_id, "go")
            assert new_worker.result(run.run_id, timeout=10) == "v10:3"
    assert old_worker.get(run.run_id).waiting_for == []
    assert old_worker.result(run.run_id, timeout=1) == "v10:3"
