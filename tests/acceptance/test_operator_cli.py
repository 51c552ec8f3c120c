"""What an operator reads: `runs list`, `runs show` and the worker's log, as real processes.

A worker process runs three runs of one workflow: one whose step fails once and then
succeeds, one whose step fails and retries in an hour, one whose step fails for good
with a message full of markup, an escape sequence and a newline.
"""

from __future__ import annotations

import json
import os
import pty
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import waypost as wp
from tests.helpers import eventually
from tests.helpers.cli import ok

WAYPOST = Path(sys.executable).with_name("waypost")
ANSI = re.compile("\x1b\\[")

APP = """
from datetime import timedelta

import waypost as wp


@wp.activity(name="flaky", retry=wp.Retry(max_attempts=2, initial_interval=timedelta(seconds=0.1)))
def flaky(ctx: wp.ActivityContext) -> str:
    if ctx.attempt < 2:
        raise ValueError(f"card declined on attempt {ctx.attempt}")
    return "paid"


@wp.activity(name="slow", retry=wp.Retry(max_attempts=3, initial_interval=timedelta(hours=1)))
def slow(ctx: wp.ActivityContext) -> str:
    raise ConnectionError("bank unreachable")


@wp.activity(name="doomed")
def doomed(ctx: wp.ActivityContext) -> str:
    raise wp.NonRetryableError("card [bold]stolen[/bold]\\x1b[31m\\nFAKE LINE")


@wp.workflow(name="pay")
async def pay(ctx: wp.WorkflowContext, how: str) -> str:
    return await ctx.run(how)
"""


def waypost(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(WAYPOST), *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "WAYPOST_DB": f"sqlite:///{tmp_path / 'ops.db'}", **env},
        check=False,
    )


def fact(out: str, name: str) -> str:
    """The value of line `name` of `runs show`."""
    found = re.search(rf"^{name} +(.*)$", out, re.M)
    assert found is not None, (name, out)
    return found.group(1)


def on_a_terminal(tmp_path: Path, *args: str, **env: str) -> str:
    """What `waypost ARGS` writes to a terminal (a pseudo-terminal)."""
    environ = {**os.environ, "WAYPOST_DB": f"sqlite:///{tmp_path / 'ops.db'}", **env}
    if "NO_COLOR" not in env:
        environ.pop("NO_COLOR", None)
    environ["COLUMNS"] = "200"
    controller, child = pty.openpty()
    proc = subprocess.Popen(
        [str(WAYPOST), *args], cwd=tmp_path, stdout=child, stderr=child, env=environ
    )
    os.close(child)
    chunks = []
    while True:
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(controller)
    assert proc.wait(timeout=60) == 0
    return b"".join(chunks).decode()


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    """Three runs through a worker process; its stderr in text, then in JSON."""
    tmp_path = tmp_path_factory.mktemp("ops")
    (tmp_path / "ops_app.py").write_text(APP)
    logs = []
    for fmt, runs in (("text", ("flaky", "slow", "doomed")), ("json", ("flaky",))):
        worker = subprocess.Popen(
            [str(WAYPOST), "worker", "--app", "ops_app", "--lease", "2", "--log-format", fmt],
            cwd=tmp_path,
            env={
                **os.environ,
                "WAYPOST_DB": f"sqlite:///{tmp_path / 'ops.db'}",
                "PYTHONPATH": str(tmp_path),
            },
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            sys.path.insert(0, str(tmp_path))
            try:
                import ops_app
            finally:
                sys.path.pop(0)
            with wp.Engine(f"sqlite:///{tmp_path / 'ops.db'}") as client:
                client.register(ops_app.pay, ops_app.flaky, ops_app.slow, ops_app.doomed)
                for how in runs:
                    run_id = f"{fmt}-{how}"
                    client.start("pay", how, run_id=run_id)

                    def settled(run_id: str = run_id, how: str = how) -> bool:
                        history = client.history(run_id)
                        failures = [e for e in history if e.type == "ActivityFailed"]
                        return client.get(run_id).finished or (how == "slow" and bool(failures))

                    eventually(settled, f"run {run_id} to settle", timeout=60)
        finally:
            worker.send_signal(signal.SIGTERM)
            _, err = worker.communicate(timeout=60)
        assert worker.returncode == 0, err
        logs.append(err)
    return tmp_path, logs[0], logs[1]


def test_runs_list_is_a_table_with_a_header_plain_when_piped(ran: tuple[Path, str, str]) -> None:
    tmp_path, _, _ = ran
    out = ok(waypost(tmp_path, "runs", "list")).stdout
    assert not ANSI.search(out)
    lines = out.splitlines()
    assert lines[0].split() == [
        "TENANT",
        "RUN",
        "ID",
        "WORKFLOW",
        "STATUS",
        "CREATED",
        "WAITS",
        "ON",
    ]
    rows = {line.split()[1]: line.split() for line in lines[1:]}
    assert set(rows) == {"text-flaky", "text-slow", "text-doomed", "json-flaky"}
    assert rows["text-doomed"][:4] == ["default", "text-doomed", "pay@1", "failed"]
    assert rows["text-flaky"][3] == "completed"
    assert rows["text-slow"][3] == "running"
    assert "activity slow" in " ".join(rows["text-slow"][6:])
    # --json keeps its fields.
    listed = json.loads(ok(waypost(tmp_path, "runs", "list", "--json")).stdout)
    assert {r["run_id"] for r in listed} == set(rows)
    assert set(listed[0]) >= {"tenant", "run_id", "status", "waiting_for", "next_action"}


def test_on_a_terminal_the_status_is_coloured_unless_no_color(ran: tuple[Path, str, str]) -> None:
    tmp_path, _, _ = ran
    coloured = on_a_terminal(tmp_path, "runs", "list")
    assert "\x1b[31mfailed" in coloured  # red
    assert "TENANT" in coloured
    plain = on_a_terminal(tmp_path, "runs", "list", NO_COLOR="1")
    assert "TENANT" in plain and "failed" in plain
    assert not ANSI.search(plain)


def test_an_empty_list_says_so_on_stderr(ran: tuple[Path, str, str]) -> None:
    tmp_path, _, _ = ran
    empty = ok(waypost(tmp_path, "runs", "list", "--status", "paused"))
    assert empty.stdout == "" and "no runs" in empty.stderr
    other = ok(waypost(tmp_path, "runs", "list", "--tenant", "nobody", "--json"))
    assert json.loads(other.stdout) == []


def test_runs_show_tells_a_retry_in_words(ran: tuple[Path, str, str]) -> None:
    tmp_path, _, _ = ran
    out = ok(waypost(tmp_path, "runs", "show", "text-slow")).stdout
    assert not ANSI.search(out)
    assert fact(out, "status") == "running"
    assert fact(out, "step") == "1 (slow), attempt 2, in progress"
    assert fact(out, "last error") == "ConnectionError: bank unreachable (attempt 1)"
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", fact(out, "next retry"))
    assert "activity slow" in fact(out, "waits on")
    assert fact(out, "next")  # what happens next, from next_action
    timeline = out.split("\n\n")[1].splitlines()
    assert timeline[0].split() == ["TIME", "SEQ", "EVENT", "STEP", "ATTEMPT", "DETAIL"]
    events = [line.split()[3] for line in timeline[1:]]
    assert events == ["RunStarted", "ActivityScheduled", "ActivityFailed"]
    assert "ConnectionError: bank unreachable; retry at" in timeline[3]


def test_runs_show_tells_a_failed_run_and_its_error_safely(ran: tuple[Path, str, str]) -> None:
    tmp_path, _, _ = ran
    out = ok(waypost(tmp_path, "runs", "show", "text-doomed")).stdout
    assert "\x1b" not in out and "FAKE LINE" in out
    assert not any(line.startswith("FAKE LINE") for line in out.splitlines())
    assert "card [bold]stolen[/bold]\\x1b[31m FAKE LINE" in out  # shown, not obeyed
    assert re.search(r"^status +failed$", out, re.M)
    assert re.search(r"^error +ActivityError: activity 'doomed'", out, re.M)
    assert "RunFailed" in out
    flaky = ok(waypost(tmp_path, "runs", "show", "text-flaky")).stdout
    assert re.search(r"^step +1 \(flaky\), attempt 2, completed$", flaky, re.M)
    assert re.search(r"^result +\"paid\"$", flaky, re.M)
    # --json gives the snapshot, as before.
    shown: dict[str, Any] = json.loads(
        ok(waypost(tmp_path, "runs", "show", "text-doomed", "--json")).stdout
    )
    assert shown["status"] == "failed" and shown["error"]["type"] == "ActivityError"
    # Another tenant's run looks exactly like no run.
    theirs = waypost(tmp_path, "runs", "show", "text-doomed", "--tenant", "other")
    nothing = waypost(tmp_path, "runs", "show", "no-such-run", "--tenant", "other")
    assert theirs.returncode == nothing.returncode == 1
    assert theirs.stderr.replace("text-doomed", "X") == nothing.stderr.replace("no-such-run", "X")


def test_the_worker_logs_claims_finishes_and_retries(ran: tuple[Path, str, str]) -> None:
    _, text, _ = ran
    lines = text.splitlines()

    def one(pattern: str) -> str:
        found = [line for line in lines if re.search(pattern, line)]
        assert len(found) == 1, (pattern, text)
        return found[0]

    one(r"INFO waypost.tasks: claimed workflow task of run text-flaky \(fence 1\)$")
    one(r"claimed run text-flaky step 1 \(flaky\) attempt 1$")
    one(
        r"finished run text-flaky step 1 \(flaky\) attempt 1: failed \(ValueError: card "
        r"declined on attempt 1\); retry at \d{4}-"
    )
    one(r"claimed run text-flaky step 1 \(flaky\) attempt 2$")
    one(r"finished run text-flaky step 1 \(flaky\) attempt 2: completed$")
    one(r"finished run text-slow step 1 \(slow\) attempt 1: failed \(ConnectionError")
    # An error message cannot start a log line of its own.
    one(r"attempt 1: failed \(NonRetryableError: card .*\\nFAKE LINE\); no retry$")
    assert not any(line.startswith("FAKE LINE") for line in lines)


def test_the_worker_logs_json_lines(ran: tuple[Path, str, str]) -> None:
    _, _, logged = ran
    records = [json.loads(line) for line in logged.splitlines()]  # every line is JSON
    tasks = [r for r in records if r["logger"] == "waypost.tasks"]
    activity = [(r["event"], r["attempt"]) for r in tasks if r["task"] == "activity"]
    assert activity == [("claimed", 1), ("retry", 1), ("claimed", 2), ("finished", 2)]
    for r in tasks:
        assert r["run_id"] == "json-flaky" and r["tenant"] == "default"
        assert r["level"] == "INFO" and r["time"]
    assert {r["step"] for r in tasks if r["task"] == "activity"} == {"1"}
    workflow = [r for r in tasks if r["task"] == "workflow"]
    assert workflow and all(r["fence"] >= 1 and r["step"] is None for r in workflow)
