"""`waypost.testing.replay`: a stored history replayed against code, no database.

Histories are made by `Driver` (the engine's part played by hand, see
tests/helpers/runtime.py), then replayed with `replay_history` / `replay_file` against
the same or changed code.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import waypost as wp
from tests.helpers.runtime import Driver, charge, refund, site
from waypost.errors import InvalidHistory
from waypost.model.events import Event
from waypost.testing.replay import (
    MAX_FILE_BYTES,
    ReplayStatus,
    read_history_file,
    replay_file,
    replay_history,
)


@wp.workflow(name="pay", version="1")
async def pay(ctx: wp.WorkflowContext, cents: int) -> str:
    receipt = await ctx.run(charge, cents)
    await ctx.wait_signal("shipped")
    return str(receipt)


@wp.workflow(name="pay", version="1")
async def pay_changed(ctx: wp.WorkflowContext, cents: int) -> str:
    receipt = await ctx.run(refund, cents)  # was charge: runs started before must not replay
    await ctx.wait_signal("shipped")
    return str(receipt)


@wp.workflow(name="pay", version="1")
async def pay_extra_step(ctx: wp.WorkflowContext, cents: int) -> str:
    receipt = await ctx.run(charge, cents)
    await ctx.wait_signal("shipped")
    await ctx.run(refund, cents)  # new at the end: a finished run never reached it
    return str(receipt)


@wp.workflow(name="pay", version="2")
async def pay_v2(ctx: wp.WorkflowContext, cents: int) -> str:
    return "v2"


def open_history() -> list[Event]:
    d = Driver(pay, charge)
    d.start(100)
    d.complete("1", "r-1")
    return d.history


def finished_history() -> list[Event]:
    d = Driver(pay, charge)
    d.start(100)
    d.complete("1", "r-1")
    d.signal("shipped", {"tracking": "t"})
    assert d.result() == "r-1"
    return d.history


def as_lines(history: list[Event]) -> str:
    """The history as `waypost runs history` prints it."""
    return "".join(
        json.dumps({"seq": e.seq, "type": str(e.type), "time": e.time.isoformat(), "data": e.data})
        + "\n"
        for e in history
    )


def test_an_open_run_that_matches_is_ok() -> None:
    res = replay_history([pay, charge], open_history(), run_id="r")
    assert res.status is ReplayStatus.OK, res
    assert (res.workflow, res.version, res.events) == ("pay", "1", 3)
    assert res.line().endswith(": ok")


def test_a_finished_run_that_matches_is_ok() -> None:
    assert replay_history(pay, finished_history()).ok


def test_a_different_activity_is_a_mismatch_naming_the_event_and_the_code_line() -> None:
    res = replay_history([pay_changed, charge, refund], open_history())
    assert res.status is ReplayStatus.MISMATCH
    m = res.mismatch
    assert m is not None
    assert (m.seq, m.event_type, m.step) == (2, "ActivityScheduled", "1")
    assert m.code_did == "ctx.run(refund)"
    assert m.site == site(pay_changed, "ctx.run(refund")
    assert (
        f"expected event 2 ActivityScheduled step 1; the code did ctx.run(refund) at {m.site}"
        in (res.line())
    )


def test_a_step_the_finished_history_lacks_is_a_mismatch() -> None:
    res = replay_history([pay_extra_step, charge, refund], finished_history())
    assert res.status is ReplayStatus.MISMATCH
    assert res.mismatch is not None
    assert res.mismatch.event_type == "RunCompleted"
    assert res.mismatch.site == site(pay_extra_step, "ctx.run(refund")


def test_an_open_run_may_go_on_with_a_new_step_after_what_it_handled() -> None:
    # The run waits for "shipped": a step added after that wait is what it will do next.
    assert replay_history([pay_extra_step, charge, refund], open_history()).ok


def test_a_version_the_code_lacks_is_reported_not_a_mismatch() -> None:
    res = replay_history([pay_v2], open_history())
    assert res.status is ReplayStatus.SKIPPED
    assert res.note == "version not in this code"


def test_a_definition_run_is_skipped_with_a_note() -> None:
    history = open_history()
    started = history[0]
    data = {"definition": {"name": "pay", "version": 1, "digest": "x"}, "input": 1}
    history[0] = Event(1, started.type, data, started.ts, started.hash)
    res = replay_history([pay, charge], history)
    assert res.status is ReplayStatus.SKIPPED
    assert "definition" in res.note


def test_a_history_file_in_both_forms_replays(tmp_path: Path) -> None:
    history = open_history()
    lines = tmp_path / "run.jsonl"
    lines.write_text(as_lines(history))
    assert replay_file(lines, [pay, charge]).ok
    listed = tmp_path / "run.json"
    listed.write_text(json.dumps([json.loads(x) for x in as_lines(history).splitlines()]))
    assert replay_file(listed, [pay, charge]).ok
    res = replay_file(listed, [pay_changed, charge, refund])
    assert res.status is ReplayStatus.MISMATCH and res.mismatch is not None
    assert res.mismatch.seq == 2


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "empty"),
        (b"not json\n", "line 1 is not a JSON event"),
        (b"\xff\xfe garbage", "not UTF-8"),
        (b"[" * 100_000 + b"]" * 100_000, "JSON"),
        (b'{"seq": 1, "type": "Nope", "data": {}}\n', "unknown type"),
        (b'{"seq": 2, "type": "RunStarted", "data": {"workflow": "pay"}}\n', "numbered"),
        (b'{"seq": 1, "type": "TimerFired", "data": {}}\n', "not RunStarted"),
        (b'{"a": 1}', "no whole-number 'seq'"),
        (b'{"seq": 1, "type": "RunStarted", "data": {}, "undecodable": true}\n', "undecodable"),
    ],
)
def test_a_garbage_history_file_is_a_clear_error(
    tmp_path: Path, content: bytes, message: str
) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(content)
    with pytest.raises(InvalidHistory, match=message):
        read_history_file(path)


def test_a_huge_history_file_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    path = tmp_path / "huge.jsonl"
    with open(path, "wb") as f:
        f.truncate(MAX_FILE_BYTES + 10)
    with pytest.raises(InvalidHistory, match="larger than"):
        read_history_file(path)


def test_a_payload_the_code_cannot_decode_is_an_error_not_ok() -> None:
    history: list[Any] = [json.loads(x) for x in as_lines(open_history()).splitlines()]
    history[0]["data"]["input"] = {"not": "an int"}

    @wp.workflow(name="pay", version="1")
    async def strict(ctx: wp.WorkflowContext, cents: int) -> str:
        return str(await ctx.run(charge, cents + 1))

    res = replay_history([strict, charge], history)
    assert not res.ok


@wp.workflow(name="pay", version="1")
async def pay_buggy(ctx: wp.WorkflowContext, cents: int) -> str:
    receipt = await ctx.run(charge, cents)
    return str({"r": receipt}["receipt"])  # a KeyError: today it suspends the run


def failed_by_an_earlier_release() -> list[Any]:
    """A run an earlier release failed when its code raised KeyError (no suspension then)."""
    history: list[Any] = [json.loads(x) for x in as_lines(open_history()).splitlines()]
    history = history[:3]  # RunStarted, ActivityScheduled, ActivityCompleted
    history.append(
        {
            "seq": 4,
            "type": "RunFailed",
            "time": history[-1]["time"],
            "data": {"error": {"type": "KeyError", "message": "'receipt'"}},
        }
    )
    return history


def test_a_run_an_earlier_release_failed_for_the_same_exception_replays_ok() -> None:
    assert replay_history([pay_buggy, charge], failed_by_an_earlier_release()).ok


def test_a_bug_on_replay_is_an_error_naming_it_not_ok() -> None:
    res = replay_history([pay_buggy, charge], open_history())
    assert res.status is ReplayStatus.ERROR
    assert res.note is not None and "KeyError" in res.note
    assert site(pay_buggy, '["receipt"]') in res.note
