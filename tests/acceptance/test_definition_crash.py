"""A definition run survives SIGKILL of the worker that runs it.

Worker A (`waypost worker --app definition_app`, a real process) runs a
definition: step `first`, then `second`, whose activity holds inside its body.
The test kills A with SIGKILL there, starts worker B, and checks that the run
completes on its pinned version with the right result, that `first` (committed
before the kill) ran once, that `second` ran again with the same idempotency
key, and that the history is intact. On SQLite and PostgreSQL.

The same for a map step: A is killed inside the activity of item 2, B finishes the
map; every item ran under its own key, each attempt at most once, and the held
item's attempt 1 was run again as attempt 2 with the same key.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import waypost as wp
from tests.helpers import eventually, of_type

from . import definition_app as app

pytestmark = pytest.mark.timeout(180)

HERE = Path(__file__).parent
WAYPOST = Path(sys.executable).with_name("waypost")

DEFINITION = """
name: crashy
start: first
steps:
  first:
    type: activity
    activity: crash.work
    input: {step: "'first'", value: n}
    output: $.a
    compensate: {activity: crash.undo, input: {step: "'first'"}}
    next: second
  second:
    type: activity
    activity: crash.work
    input: {step: "'second'", value: a}
    output: $.b
    next: done
  done: {type: succeed, output: "{a: a, b: b}"}
"""


def worker(url: str, log: Path, hold: str | None) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(HERE), "DEF_LOG": str(log)}
    if hold:
        env["DEF_HOLD"] = hold
    else:
        env.pop("DEF_HOLD", None)
    return subprocess.Popen(
        [str(WAYPOST), "worker", "--db", url, "--app", "definition_app", "--lease", "1"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def killed_inside(url: str, log: Path, step: str, what: str) -> None:
    """A worker that holds inside `step` once it is there is killed -9."""
    a = worker(url, log, hold=step)
    try:
        eventually(lambda: any(e["step"] == step for e in app.read_log(str(log))), what, timeout=60)
        a.send_signal(signal.SIGKILL)
        a.wait(30)
    finally:
        if a.poll() is None:
            a.kill()
        a.communicate(timeout=30)
    assert a.returncode == -signal.SIGKILL


def test_a_definition_run_survives_sigkill_mid_step(db_url: str, tmp_path: Path) -> None:
    log = tmp_path / "executions.jsonl"
    engine = wp.Engine(db_url)
    try:
        engine.publish(DEFINITION, by="test")
        run = engine.start("crashy", {"n": 5}, run_id="crashy-1")
        killed_inside(db_url, log, "second", "worker A inside step 'second'")
        assert not engine.publish(DEFINITION).created  # the same content: still version 1
        v2 = engine.publish(DEFINITION.replace("next: done", "next: done\n    description: v2"))
        assert v2.version == 2
        b = worker(db_url, log, hold=None)
        try:
            assert engine.result(run.run_id, timeout=60) == {"a": 10, "b": 20}
        finally:
            b.send_signal(signal.SIGTERM)
            _, err = b.communicate(timeout=60)
        assert b.returncode == 0, err.decode()
        assert b"Traceback" not in err
        executions = app.read_log(str(log))
        firsts = [e for e in executions if e["step"] == "first"]
        seconds = [e for e in executions if e["step"] == "second"]
        assert len(firsts) == 1  # committed before the kill: never run again
        assert len(seconds) == 2 and seconds[0]["key"] == seconds[1]["key"]
        assert [e["attempt"] for e in seconds] == [1, 2]
        assert not any(e["step"].startswith("undo") for e in executions)
        info = engine.get(run.run_id)
        assert info.version == "1"  # version 2 was published meanwhile; the run stays on 1
        history = engine.history(run.run_id)
        second_step = [
            e.data["step"]
            for e in of_type(history, "ActivityScheduled")
            if e.data["definition_step"] == "second"
        ]
        failed: list[Any] = of_type(history, "ActivityFailed")
        assert [e.data["step"] for e in failed] == second_step  # attempt 1 lost its worker
        assert engine.verify(run.run_id) == []
    finally:
        engine.close()


MAP_DEFINITION = """
name: crashy_map
start: each
steps:
  each:
    type: map
    items: ns
    concurrency: 2
    iterator:
      start: work
      steps:
        work:
          type: activity
          activity: crash.work
          input: {step: "join('-', ['item', to_string(index)])", value: item}
          output: $.v
    output: $.results
    next: done
  done: {type: succeed, output: "results[].v"}
"""


def test_a_map_survives_sigkill_mid_item_and_each_attempt_runs_once(
    db_url: str, tmp_path: Path
) -> None:
    log = tmp_path / "executions.jsonl"
    engine = wp.Engine(db_url)
    try:
        engine.publish(MAP_DEFINITION, by="test")
        run = engine.start("crashy_map", {"ns": [1, 2, 3, 4]}, run_id="crashy-map-1")
        killed_inside(db_url, log, "item-2", "worker A inside item 2")
        b = worker(db_url, log, hold=None)
        try:
            assert engine.result(run.run_id, timeout=60) == [2, 4, 6, 8]
        finally:
            b.send_signal(signal.SIGTERM)
            _, err = b.communicate(timeout=60)
        assert b.returncode == 0, err.decode()
        executions = app.read_log(str(log))
        by_item: dict[str, list[dict[str, Any]]] = {}
        for execution in executions:
            by_item.setdefault(execution["step"], []).append(execution)
        assert sorted(by_item) == ["item-0", "item-1", "item-2", "item-3"]
        # Each item has its own key, and each attempt of it ran at most once (an attempt
        # that worker A claimed but was killed before starting never ran at all).
        assert len({runs[0]["key"] for runs in by_item.values()}) == 4
        for runs in by_item.values():
            attempts = [e["attempt"] for e in runs]
            assert len({e["key"] for e in runs}) == 1
            assert attempts == sorted(set(attempts))
        held = by_item["item-2"]
        assert [e["attempt"] for e in held] == [1, 2]  # attempt 1 lost its worker
        history = engine.history(run.run_id)
        completed = of_type(history, "ActivityCompleted")
        assert len(completed) == 4  # one result per item, none applied twice
        assert engine.verify(run.run_id) == []
    finally:
        engine.close()
