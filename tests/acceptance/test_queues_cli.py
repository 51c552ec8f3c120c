"""`waypost queues list|show|set` as real processes on a SQLite file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.cli import example_run, failed, ok, waypost

pytestmark = pytest.mark.timeout(180)


def test_queues_are_set_shown_and_listed_from_the_command_line(tmp_path: Path) -> None:
    set_ = ok(
        waypost(tmp_path, "queues", "set", "payments", "--concurrency", "3", "--rate", "10/1s")
    )
    assert "payments" in set_.stdout and "10/1s" in set_.stdout
    shown = json.loads(ok(waypost(tmp_path, "queues", "show", "payments", "--json")).stdout)
    assert (shown["concurrency"], shown["rate"]) == (3, [10, 1.0])
    assert (shown["depth"], shown["running"], shown["oldest_age"]) == (0, 0, None)
    assert shown["configured"] is True

    kept = json.loads(
        ok(waypost(tmp_path, "queues", "set", "payments", "--rate", "100/m", "--json")).stdout
    )
    assert (kept["concurrency"], kept["rate"]) == (3, [100, 60.0])
    removed = json.loads(
        ok(waypost(tmp_path, "queues", "set", "payments", "--concurrency", "none", "--json")).stdout
    )
    assert (removed["concurrency"], removed["rate"]) == (None, [100, 60.0])
    ok(waypost(tmp_path, "queues", "set", "bulk", "--concurrency", "1", "--tenant", "acme"))

    table = ok(waypost(tmp_path, "queues", "list")).stdout.splitlines()
    assert table[0].split() == [
        "QUEUE",
        "CONCURRENCY",
        "RATE",
        "DEPTH",
        "RUNNING",
        "OLDEST",
        "ENQUEUED",
        "ADMITTED",
    ]
    assert [line.split()[0] for line in table[1:]] == ["payments"]  # acme's is its own
    listed = json.loads(
        ok(waypost(tmp_path, "queues", "list", "--tenant", "acme", "--json")).stdout
    )
    assert [q["name"] for q in listed] == ["bulk"]

    assert "N/PERIOD" in failed(waypost(tmp_path, "queues", "set", "payments", "--rate", "10"))
    assert "N/PERIOD" in failed(waypost(tmp_path, "queues", "set", "payments", "--rate", "x/s"))
    assert "whole number" in failed(
        waypost(tmp_path, "queues", "set", "payments", "--concurrency", "-1")
    )
    assert "concurrency must be a whole number" in failed(
        waypost(tmp_path, "queues", "set", "payments", "--concurrency", "0")
    )
    assert "give a limit" in failed(waypost(tmp_path, "queues", "set", "payments"))
    assert "queue's name" in failed(waypost(tmp_path, "queues", "set", "a b", "--concurrency", "1"))
    assert "no queue" in failed(waypost(tmp_path, "queues", "show", "nothing"))
    # Nothing of the refused commands was written.
    after = json.loads(ok(waypost(tmp_path, "queues", "show", "payments", "--json")).stdout)
    assert (after["concurrency"], after["rate"]) == (None, [100, 60.0])
    assert "--queues" in ok(waypost(tmp_path, "worker", "--help")).stdout
    keyed = json.loads(
        ok(
            waypost(tmp_path, "queues", "set", "payments", "--key-concurrency", "2", "--json")
        ).stdout
    )
    assert (keyed["key_concurrency"], keyed["rate"]) == (2, [100, 60.0])
    assert "--concurrency-key" in ok(waypost(tmp_path, "start", "--help")).stdout
    assert "--queue" in ok(waypost(tmp_path, "start", "--help")).stdout
    assert "--queue" in ok(waypost(tmp_path, "runs", "start", "--help")).stdout
    per_worker = json.loads(
        ok(
            waypost(tmp_path, "queues", "set", "payments", "--worker-concurrency", "2", "--json")
        ).stdout
    )
    assert (per_worker["worker_concurrency"], per_worker["key_concurrency"]) == (2, 2)
    assert "worker_concurrency must be a whole number" in failed(
        waypost(tmp_path, "queues", "set", "payments", "--worker-concurrency", "0")
    )
    assert "queue's name" in failed(waypost(tmp_path, "start", "anything", "1", "--queue", "a b"))
    assert "--worker-concurrency" in ok(waypost(tmp_path, "queues", "set", "--help")).stdout


def test_the_guides_queue_example_runs() -> None:
    done = example_run("queues.py")
    assert "at most 2 payments ran at once" in done.stdout
    assert "[('payments', 2, (5, 1.0))]" in done.stdout


def test_the_guides_workflow_queue_example_runs() -> None:
    done = example_run("workflow_queues.py")
    assert "admitted 1, enqueued 3" in done.stdout
    assert "urgent is enqueued" in done.stdout
    assert "at most 1 report ran at once; in order: monthly-0, urgent, monthly-1, monthly-2" in (
        done.stdout
    )
