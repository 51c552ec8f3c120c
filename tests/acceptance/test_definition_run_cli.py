"""Runs of published definitions, driven through the command line: real processes.

`waypost definitions publish` two versions of a definition, `waypost start` runs of
it, a `waypost worker` (no --app: it serves published definitions) takes them to
their wait step, and `waypost runs migrate` moves them from version 1 to 2, one
run or --all, with --dry-run first. The worker's --http-allow decides which hosts
`http` steps reach.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import eventually
from tests.helpers.definitions import waits_then_succeeds
from tests.helpers.servers import stopped_cleanly

WAYPOST = Path(sys.executable).with_name("waypost")
pytestmark = pytest.mark.timeout(180)

# Version 1 waits for "go", then succeeds. Version 2 needs a quantity in the input
# and waits for a confirmation after "go".
V1 = """
name: purchase
input:
  type: object
  required: [item]
  properties:
    item: {type: string}
    qty: {type: integer, minimum: 1}
start: hold
steps:
""" + waits_then_succeeds(("hold", "go"))
V2 = """
name: purchase
input:
  type: object
  required: [item, qty]
  properties:
    item: {type: string}
    qty: {type: integer, minimum: 1}
start: hold
steps:
""" + waits_then_succeeds(("hold", "go"), ("confirm", "confirmed"))


class Cli:
    """The `waypost` command on one SQLite file."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.env = {**os.environ, "WAYPOST_DB": f"sqlite:///{tmp_path / 'waypost.db'}"}

    def __call__(self, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [str(WAYPOST), *args],
            capture_output=True,
            text=True,
            timeout=60,
            env=self.env,
            cwd=self.tmp_path,
            check=False,
        )
        if ok:
            assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc

    def publish(self, name: str, source: str) -> subprocess.CompletedProcess[str]:
        path = self.tmp_path / name
        path.write_text(source)
        return self("definitions", "publish", str(path), "--by", "ops")

    def start(self, payload: dict[str, Any], *options: str) -> str:
        return self("start", "purchase", json.dumps(payload), *options).stdout.strip()

    def show(self, run_id: str) -> dict[str, Any]:
        shown: dict[str, Any] = json.loads(self("runs", "show", run_id, "--json").stdout)
        return shown

    def history(self, run_id: str) -> list[dict[str, Any]]:
        lines = self("runs", "history", run_id).stdout.splitlines()
        return [json.loads(line) for line in lines]

    def waiting_for(self, run_id: str, signal_name: str) -> dict[str, Any]:
        def waits() -> dict[str, Any] | None:
            shown = self.show(run_id)
            signals = [w.get("name") for w in shown["waiting_for"] if w.get("kind") == "signal"]
            return shown if shown["status"] == "waiting" and signal_name in signals else None

        return eventually(waits, f"run {run_id} to wait for {signal_name!r}", timeout=60)


@contextlib.contextmanager
def worker(cli: Cli, *options: str) -> Iterator[subprocess.Popen[str]]:
    """A `waypost worker` without --app (so: published definitions only), stopped by SIGTERM."""
    proc = subprocess.Popen(
        [str(WAYPOST), "worker", *options],
        env=cli.env,
        cwd=cli.tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    with stopped_cleanly(proc):
        yield proc


def _blocks(out: str) -> dict[str, list[str]]:
    """The reports of a batch: heading line -> its indented lines (the summary left out)."""
    blocks: dict[str, list[str]] = {}
    lines: list[str] = []
    for line in out.splitlines()[:-1]:
        if line.startswith("  "):
            lines.append(line)
        else:
            lines = blocks.setdefault(line, [])
    return blocks


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    cli = Cli(tmp_path)
    cli.publish("v1.yaml", V1)
    cli.publish("v2.yaml", V2)
    return cli


def test_a_waiting_run_is_checked_then_moved_to_version_2(cli: Cli) -> None:
    with worker(cli):
        run_id = cli.start({"item": "pen", "qty": 2}, "--version", "1")
        assert cli.waiting_for(run_id, "go")["version"] == "1"

        dry = cli("runs", "migrate", run_id, "--to", "2", "--dry-run")
        assert f"{run_id} (purchase)" in dry.stdout
        assert "version 1, step hold -> version 2, step hold" in dry.stdout
        assert "compatible; dry run, nothing changed" in dry.stdout
        assert cli.show(run_id)["version"] == "1"
        assert "RunMigrated" not in [e["type"] for e in cli.history(run_id)]

        moved = cli("runs", "migrate", run_id, "--to", "2", "--reason", "needs a confirmation")
        assert "compatible; migrated" in moved.stdout
        assert cli.show(run_id)["version"] == "2"
        [migrated] = [e for e in cli.history(run_id) if e["type"] == "RunMigrated"]
        assert migrated["data"]["from_version"] == 1 and migrated["data"]["to_version"] == 2
        assert migrated["data"]["reason"] == "needs a confirmation"
        assert migrated["data"]["by"] == getpass.getuser()

        # The run goes on by version 2: after "go" it waits for the new confirmation.
        cli("signal", run_id, "go")
        cli.waiting_for(run_id, "confirmed")
        again = cli("runs", "migrate", run_id, "--to", "2", "--dry-run", "--json", ok=False)
        assert again.returncode == 1
        report = json.loads(again.stdout)
        assert report["compatible"] is False and report["dry_run"] is True


def test_migrate_refuses_bad_requests_and_explains_incompatible_moves(cli: Cli) -> None:
    with worker(cli):
        run_id = cli.start({"item": "pen", "qty": 2}, "--version", "1")
        cli.waiting_for(run_id, "go")

    bad_map = cli("runs", "migrate", run_id, "--to", "2", "--map", "hold", "--dry-run", ok=False)
    assert bad_map.returncode == 2 and "'hold' is not OLD=NEW" in bad_map.stderr

    missing_step = cli(
        "runs", "migrate", run_id, "--to", "2", "--map", "hold=nowhere", "--reason", "r", ok=False
    )
    assert missing_step.returncode == 1, missing_step.stderr
    assert "not compatible; not migrated" in missing_step.stdout
    assert (
        "reason: the mapping sends step 'hold' to 'nowhere', which the new version does not have"
        in missing_step.stdout
    )

    no_version = cli("runs", "migrate", run_id, "--to", "9", "--reason", "r", ok=False)
    assert no_version.returncode == 1
    assert "definition 'purchase' has no version 9" in no_version.stderr

    both = cli("runs", "migrate", run_id, "--all", "purchase", "--to", "2", "--dry-run", ok=False)
    assert both.returncode == 2 and "either RUN_ID or --all" in both.stderr
    unknown = cli("runs", "migrate", "no-such-run", "--to", "2", "--dry-run", ok=False)
    assert unknown.returncode == 1 and "no run 'no-such-run'" in unknown.stderr

    assert cli.show(run_id)["version"] == "1"
    assert "RunMigrated" not in [e["type"] for e in cli.history(run_id)]

    # As the plain form `runs migrate RUN_ID --to V` moves it, the record says so.
    plain = cli("runs", "migrate", run_id, "--to", "2")
    assert "compatible; migrated" in plain.stdout and "no --reason given" in plain.stderr
    [migrated] = [e for e in cli.history(run_id) if e["type"] == "RunMigrated"]
    assert migrated["data"]["reason"].startswith("no reason given")


def test_migrate_all_reports_each_run_and_sums_up(cli: Cli) -> None:
    with worker(cli):
        movable = cli.start({"item": "pen", "qty": 2}, "--version", "1")
        stuck = cli.start({"item": "cup"}, "--version", "1")  # version 2 needs a qty
        for run_id in (movable, stuck):
            cli.waiting_for(run_id, "go")

    args = ("runs", "migrate", "--all", "purchase", "--from", "1", "--to", "2")
    dry = cli(*args, "--dry-run", ok=False)
    assert dry.returncode == 1, dry.stderr
    blocks = _blocks(dry.stdout)
    assert set(blocks) == {f"{movable} (purchase)", f"{stuck} (purchase)"}
    assert "  compatible; dry run, nothing changed" in blocks[f"{movable} (purchase)"]
    assert "  not compatible; dry run, nothing changed" in blocks[f"{stuck} (purchase)"]
    assert any(
        line.startswith("  reason: the run's input does not satisfy the new version's input")
        for line in blocks[f"{stuck} (purchase)"]
    )
    assert dry.stdout.splitlines()[-1] == (
        "2 runs: 1 compatible, 1 not compatible (dry run, nothing changed)"
    )
    reports = json.loads(cli(*args, "--dry-run", "--json", ok=False).stdout)
    assert {r["run_id"]: r["compatible"] for r in reports} == {movable: True, stuck: False}
    assert {cli.show(movable)["version"], cli.show(stuck)["version"]} == {"1"}

    done = cli(*args, "--reason", "qty is needed now", "--by", "ops", ok=False)
    assert done.returncode == 1
    assert done.stdout.splitlines()[-1] == "2 runs: 1 migrated, 1 not compatible"
    assert cli.show(movable)["version"] == "2"
    assert cli.show(stuck)["version"] == "1"

    rest = cli(*args, "--dry-run", ok=False)
    assert rest.returncode == 1 and rest.stdout.splitlines()[-1].startswith("1 run: ")


def test_start_refuses_input_the_definition_does_not_accept(cli: Cli) -> None:
    bad = cli("start", "purchase", json.dumps({"qty": "two"}), ok=False)
    assert bad.returncode == 1
    assert "nothing started" in bad.stderr
    assert "  input: 'item' is a required property" in bad.stderr
    assert "  input.qty: 'two' is not of type 'integer'" in bad.stderr
    assert json.loads(cli("runs", "list", "--json").stdout) == []

    not_a_number = cli("start", "purchase", '{"item": "pen"}', "--version", "two", ok=False)
    assert (
        not_a_number.returncode == 2 and "a definition version is a number" in not_a_number.stderr
    )
    no_such = cli("start", "purchase", '{"item": "pen"}', "--version", "3", ok=False)
    assert no_such.returncode == 1 and "has no version 3" in no_such.stderr
    assert json.loads(cli("runs", "list", "--json").stdout) == []

    newest = cli.start({"item": "pen", "qty": 1})
    assert cli.show(newest)["version"] == "2"


class _Pong(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = json.dumps({"pong": self.path}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def pong_server() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Pong)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def _calling(name: str, url: str) -> str:
    return f"""
name: {name}
start: call
steps:
  call:
    type: activity
    http: {{url: "{url}"}}
    output: $.reply
    next: done
  done:
    type: succeed
    output: reply
"""


def test_worker_http_steps_reach_only_allowed_hosts(tmp_path: Path, pong_server: int) -> None:
    cli = Cli(tmp_path)
    published = cli.publish(
        "allowed.yaml", _calling("allowed", f"http://127.0.0.1:{pong_server}/ping")
    )
    # No worker runs yet: publishing succeeds and says where runs would wait.
    assert published.stdout.startswith("published allowed version 1")
    assert "warning: no running worker runs http steps" in published.stderr
    cli.publish("refused.yaml", _calling("refused", f"http://localhost:{pong_server}/ping"))
    malformed = cli("worker", "--http-allow", "example.com/path", ok=False)
    assert malformed.returncode == 2 and "--http-allow" in malformed.stderr

    with worker(cli, "--http-allow", "*.example.com", "--http-allow", f"127.0.0.1:{pong_server}"):
        allowed = cli("start", "allowed").stdout.strip()
        refused = cli("start", "refused").stdout.strip()

        def finished(run_id: str) -> dict[str, Any] | None:
            shown = cli.show(run_id)
            return shown if shown["finished_at"] else None

        done = eventually(lambda: finished(allowed), "the allowed call", timeout=60)
        assert done["status"] == "completed" and done["result"] == {"pong": "/ping"}
        failed = eventually(lambda: finished(refused), "the refused call", timeout=60)
        assert failed["status"] == "failed"
        assert "host localhost" in json.dumps(failed["error"])
        assert "not allowed" in json.dumps(failed["error"])
