"""Bytes through a run (the default codec's base64), and an activity's failure with the
chain of errors it came from, as the workflow sees them."""

from __future__ import annotations

from typing import Any

import waypost as wp


@wp.activity
def render(ctx: wp.ActivityContext, text: str) -> bytes:
    return b"%PDF-" + text.encode() + b"\x00\xff"


@wp.activity(retry=wp.Retry(max_attempts=1))
def charge(ctx: wp.ActivityContext) -> None:
    try:
        raise ConnectionError("reset by peer")
    except ConnectionError as exc:
        raise RuntimeError("the gateway did not answer") from exc


@wp.workflow(name="payload_types")
async def payload_types(ctx: wp.WorkflowContext, stamp: bytes) -> dict[str, Any]:
    pdf = await ctx.run(render, "hello")
    try:
        await ctx.run(charge)
    except wp.ActivityError as err:
        return {"pdf": pdf, "stamp": stamp, "error": err.type, "causes": err.causes}
    return {}


def test_bytes_and_a_failures_causes_reach_the_workflow(make_engine: Any) -> None:
    engine = make_engine(payload_types, render, charge)
    with engine.running():
        run = engine.start(payload_types, b"\x01\x02")
        got = engine.result(run.run_id, timeout=60)
    assert got["pdf"] == "JVBERi1oZWxsbwD/"  # the result read without a hint: base64 text
    assert got["stamp"] == "AQI="
    assert got["error"] == "RuntimeError"
    assert got["causes"] == [
        {"type": "ConnectionError", "module": "builtins", "message": "reset by peer"}
    ]
