"""The command line and the examples, run as a new user would: real processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import waypost as wp
from tests.helpers.cli import run, waypost_on
from tests.helpers.servers import ROOT, WAYPOST, example


def test_demo_runs_the_example_workflows_to_completion(tmp_path: Path) -> None:
    proc = run([str(WAYPOST), "demo", "--db", f"sqlite:///{tmp_path / 'demo.db'}"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "completed -> {'order'" in out and "'status': 'delivered'" in out
    assert "cancelled (customer changed their mind)" in out
    assert "refund ch-C-" in out  # the compensation ran on cancel
    assert "chain check: intact" in out
    # The workflow defined as data: run, version 2 published, the waiting run migrated.
    assert "waits at step 'review' on version 1" in out
    assert "to version 2 (dry run): compatible" in out
    assert "to version 2 (migrated): compatible" in out
    assert "tell the customer" in out and "completed on version 2" in out


@pytest.mark.parametrize(
    "script",
    [
        "orders.py",
        "approvals_by_signal.py",
        "purchase_approval.py",
        "schedules.py",
        "queries_and_updates.py",
    ],
)
def test_examples_run(tmp_path: Path, script: str) -> None:
    proc = run([sys.executable, str(ROOT / "examples" / script)], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "->" in proc.stdout
    assert "Traceback" not in proc.stderr


def test_the_order_lines_example_maps_tolerates_and_catches(tmp_path: Path) -> None:
    script = str(ROOT / "examples" / "order_lines_definition.py")
    proc = run([sys.executable, script, f"sqlite:///{tmp_path / 'lines.db'}"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "order A1 -> total 1000, shipped as parcel-A1" in out
    # Results in line order, whatever order the lines were charged in.
    assert out.index("ch-A1-book-1: 100") < out.index("ch-A1-book-4: 400")
    assert "order B2 -> shipped as parcel-B2" in out and "'type': 'PaymentDeclined'" in out
    assert "told the customer of C3" in out
    assert "order C3 -> payment_declined" in out


def test_the_definition_example_publishes_runs_and_migrates(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'purchases.db'}"
    script = str(ROOT / "examples" / "purchase_order_definition.py")
    proc = run([sys.executable, script, db], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "published the same text again: version 1, new: False" in out
    assert "PO-1 finished on version 1" in out
    assert "compatible, dry run, nothing changed" in out
    assert "compatible, migrated" in out
    assert "wes approved 'inspect_goods'" in out  # only version 2 has this step
    assert "PO-2 finished on version 2" in out
    assert "undone: ['reserve_budget']" in out
    engine = wp.Engine(db)
    try:
        runs = {r.input["order_id"]: r for r in engine.list_runs(workflow="purchase_order")}
        assert {k: (r.version, r.status) for k, r in runs.items()} == {
            "PO-1": ("1", "completed"),
            "PO-2": ("2", "completed"),
            "PO-3": ("2", "failed"),
        }
        migrated = [e for e in engine.history(runs["PO-2"].run_id) if e.type == "RunMigrated"]
        assert migrated[0].data["by"] == "ops-olga"
    finally:
        engine.close()


def test_cli_inspects_signals_and_cancels_runs(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'cli.db'}"
    ex = example("approvals_by_signal")
    with wp.Engine(db) as engine:
        engine.register(ex.review, ex.publish)
        waiting = engine.start(ex.review, "doc-a", run_id="review-a").run_id
        doomed = engine.start(ex.review, "doc-b", run_id="review-b").run_id

    listed = run([str(WAYPOST), "runs", "list", "--db", db, "--json"], cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert {r["run_id"] for r in json.loads(listed.stdout)} == {waiting, doomed}

    sent = run([str(WAYPOST), "signal", waiting, "approve", '"ada"', "--db", db], cwd=tmp_path)
    assert sent.returncode == 0, sent.stderr
    bad = run([str(WAYPOST), "signal", waiting, "approve", "{not json", "--db", db], cwd=tmp_path)
    assert bad.returncode != 0 and "not JSON" in bad.stderr
    missing = run([str(WAYPOST), "signal", "nope", "approve", "--db", db], cwd=tmp_path)
    assert missing.returncode == 1 and "no run 'nope'" in missing.stderr

    cancelled = run(
        [str(WAYPOST), "cancel", doomed, "--reason", "wrong doc", "--db", db], cwd=tmp_path
    )
    assert cancelled.returncode == 0, cancelled.stderr
    no_reason = run([str(WAYPOST), "cancel", doomed, "--db", db], cwd=tmp_path)
    assert no_reason.returncode == 2 and "--reason" in no_reason.stderr

    history = run([str(WAYPOST), "runs", "history", waiting, "--db", db], cwd=tmp_path)
    types = [json.loads(line)["type"] for line in history.stdout.splitlines()]
    assert types == ["RunStarted", "SignalReceived"]

    verified = run([str(WAYPOST), "runs", "verify", waiting, "--db", db], cwd=tmp_path)
    assert verified.returncode == 0 and "intact" in verified.stdout

    shown = run([str(WAYPOST), "runs", "show", waiting, "--db", db, "--json"], cwd=tmp_path)
    assert json.loads(shown.stdout)["status"] == "running"


def test_verify_finds_an_edited_event(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "tamper.db"
    db = f"sqlite:///{path}"
    ex = example("approvals_by_signal")
    with wp.Engine(db) as engine:
        engine.register(ex.review, ex.publish)
        run_id = engine.start(ex.review, "doc", run_id="r").run_id
        engine.signal(run_id, "approve", "mallory")
    conn = sqlite3.connect(path)
    conn.execute("UPDATE events SET data = replace(data, 'mallory', 'alice') WHERE seq = 2")
    conn.commit()
    conn.close()
    proc = run([str(WAYPOST), "runs", "verify", run_id, "--db", db], cwd=tmp_path)
    assert proc.returncode == 1
    assert "event 2: hash does not match" in proc.stderr


def test_worker_process_serves_runs_and_stops_on_sigterm(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'worker.db'}"
    env = {"PYTHONPATH": str(ROOT / "examples")}
    worker = subprocess.Popen(
        [str(WAYPOST), "worker", "--db", db, "--app", "worker_app", "--lease", "2"],
        cwd=tmp_path,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        worker_app = example("worker_app")
        with wp.Engine(db) as client:  # a client: registers, but does not run workers
            client.register(worker_app.greet, worker_app.hello)
            handle = client.start("greet", "Ada")
            assert client.result(handle.run_id, timeout=60) == "hello, Ada (attempt 1)"
    finally:
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=60)
    assert worker.returncode == 0, err
    assert "serving" in err


def test_worker_refuses_a_module_without_workflows(tmp_path: Path) -> None:
    proc = run(
        [str(WAYPOST), "worker", "--db", f"sqlite:///{tmp_path / 'x.db'}", "--app", "json"],
        cwd=tmp_path,
    )
    assert proc.returncode == 1 and "defines no @workflow" in proc.stderr
    proc = run(
        [str(WAYPOST), "worker", "--db", f"sqlite:///{tmp_path / 'x.db'}", "--app", "no_such_mod"],
        cwd=tmp_path,
    )
    assert proc.returncode == 1 and "cannot import" in proc.stderr


def test_bad_database_urls_get_clear_errors(tmp_path: Path) -> None:
    proc = run([str(WAYPOST), "runs", "list", "--db", "mysql://x"], cwd=tmp_path)
    assert proc.returncode == 1 and "unsupported database URL" in proc.stderr
    proc = run(
        [str(WAYPOST), "runs", "list", "--db", f"sqlite:///{tmp_path}/no/such/dir/x.db"],
        cwd=tmp_path,
    )
    assert proc.returncode == 1 and "does not exist" in proc.stderr
    assert not (tmp_path / "no").exists()


def test_the_readme_workflow_runs_as_written(tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text()
    start = readme.index("## A workflow")
    code = readme[
        readme.index("```python", start) + len("```python") : readme.index("```\n", start + 20)
    ]
    script = tmp_path / "order.py"
    script.write_text(code)
    proc = run([sys.executable, str(script)], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "order o-1 confirmed" in proc.stdout
    assert "'status': 'done', 'tracking': 'TRK1'" in proc.stdout
    again = run([sys.executable, str(script)], cwd=tmp_path)  # the same run_id: the same run
    assert "RunNotActive" in again.stderr
    assert "order o-1 confirmed" not in again.stdout


def test_definitions_validate_and_schema(tmp_path: Path) -> None:
    ok = run(
        [
            str(WAYPOST),
            "definitions",
            "validate",
            str(ROOT / "examples/definitions/purchase_order.yaml"),
        ],
        cwd=tmp_path,
    )
    assert ok.returncode == 0, ok.stderr
    assert "valid: purchase_order" in ok.stdout and "digest" in ok.stdout
    bad = run(
        [str(WAYPOST), "definitions", "validate", str(ROOT / "examples/definitions/invalid.yaml")],
        cwd=tmp_path,
    )
    assert bad.returncode == 1
    assert "steps.decide.default: no step 'order'" in bad.stderr
    assert "unreachable" in bad.stderr
    twenty_one = {
        "name": "long",
        "start": "s1",
        "steps": {
            f"s{i}": (
                {"type": "succeed"}
                if i == 21
                else {"type": "wait", "duration": 1, "next": f"s{i + 1}"}
            )
            for i in range(1, 22)
        },
    }
    path = tmp_path / "long.json"
    path.write_text(json.dumps(twenty_one))
    refused = run([str(WAYPOST), "definitions", "validate", str(path)], cwd=tmp_path)
    assert refused.returncode == 1 and "at most 20 steps (found 21)" in refused.stderr
    schema = run([str(WAYPOST), "definitions", "schema"], cwd=tmp_path)
    assert json.loads(schema.stdout)["$schema"].startswith("https://json-schema.org/")


def test_definitions_publish_list_show(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'defs.db'}"
    source = str(ROOT / "examples/definitions/purchase_order.yaml")
    first = run(
        [str(WAYPOST), "definitions", "publish", source, "--db", db, "--by", "ops"], cwd=tmp_path
    )
    assert first.returncode == 0, first.stderr
    assert "published purchase_order version 1" in first.stdout
    again = run([str(WAYPOST), "definitions", "publish", source, "--db", db], cwd=tmp_path)
    assert "already published as purchase_order version 1" in again.stdout
    bad = run(
        [
            str(WAYPOST),
            "definitions",
            "publish",
            str(ROOT / "examples/definitions/invalid.yaml"),
            "--db",
            db,
        ],
        cwd=tmp_path,
    )
    assert bad.returncode == 1 and "nothing published" in bad.stderr
    listed = json.loads(
        run([str(WAYPOST), "definitions", "list", "--json", "--db", db], cwd=tmp_path).stdout
    )
    assert [(d["name"], d["version"], d["published_by"]) for d in listed] == [
        ("purchase_order", 1, "ops")
    ]
    shown = json.loads(
        run(
            [str(WAYPOST), "definitions", "show", "purchase_order", "--db", db], cwd=tmp_path
        ).stdout
    )
    assert shown["definition"]["start"] and shown["digest"] == listed[0]["digest"]


def test_verify_with_a_chain_key_and_a_damaged_event(tmp_path: Path) -> None:
    import base64
    import sqlite3

    from waypost.model.chain import parse_keys

    path = tmp_path / "keyed.db"
    db = f"sqlite:///{path}"
    secret = base64.urlsafe_b64encode(b"q" * 32).decode()
    env = {**os.environ, "WAYPOST_CHAIN_KEYS": f"k1:{secret}"}
    ex = example("approvals_by_signal")
    chain = wp.Chain(parse_keys(f"k1:{secret}"))
    with wp.Engine(db, chain=chain) as engine:
        engine.register(ex.review, ex.publish)
        run_id = engine.start(ex.review, "doc", run_id="r").run_id
        engine.signal(run_id, "approve", "mallory")
    ok = waypost_on(db, "runs", "verify", run_id, env=env, cwd=tmp_path)
    assert ok.returncode == 0 and "history intact (keyed with 'k1')" in ok.stdout, ok.stderr
    no_key = run([str(WAYPOST), "runs", "verify", run_id, "--db", db], cwd=tmp_path)
    assert no_key.returncode == 1 and "which this process was not given" in no_key.stderr
    conn = sqlite3.connect(path)
    conn.execute("UPDATE events SET data = '{\"name\": ' WHERE seq = 2")
    conn.commit()
    conn.close()
    damaged = waypost_on(db, "runs", "verify", run_id, env=env, cwd=tmp_path)
    assert (
        damaged.returncode == 1 and "event 2: its stored data is not valid JSON" in damaged.stderr
    )
    assert "Traceback" not in damaged.stderr
    history = waypost_on(db, "runs", "history", run_id, env=env, cwd=tmp_path)
    assert history.returncode == 0 and "Traceback" not in history.stderr


def test_the_newcomers_stumbles(tmp_path: Path) -> None:
    """Commands that need a database do not create one; --app finds a module in the working
    directory; errors are one line, never a traceback."""
    db = "sqlite:///nothing-here.db"
    for args in (
        ["runs", "list"],
        ["runs", "show", "r1"],
        ["runs", "history", "r1"],
        ["runs", "verify", "r1"],
        ["approvals", "list"],
        ["groups", "list"],
        ["groups", "remove", "managers", "ann"],
        ["definitions", "list"],
        ["definitions", "show", "purchase"],
        ["runs", "migrate", "r1", "--to", "2"],
        ["signal", "r1", "go"],
        ["cancel", "r1", "--reason", "typo"],
        ["approve", "a1", "--token", "t", "--as", "ann"],
    ):
        proc = run([str(WAYPOST), *args, "--db", db], cwd=tmp_path)
        assert proc.returncode == 1, (args, proc.stderr)
        assert "there is no database at nothing-here.db" in proc.stderr
        assert "Traceback" not in proc.stderr
    assert not (tmp_path / "nothing-here.db").exists()

    (tmp_path / "here_app.py").write_text(
        "import waypost as wp\n\n"
        "@wp.workflow(name='here')\n"
        "async def here(ctx: wp.WorkflowContext) -> str:\n"
        "    return 'found'\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    started = subprocess.run(
        [str(WAYPOST), "start", "here", "--app", "here_app", "--db", "sqlite:///here.db"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert started.returncode == 0, started.stderr

    closed = run(
        [str(WAYPOST), "runs", "list", "--db", "postgresql://x@127.0.0.1:1/none"], cwd=tmp_path
    )
    assert closed.returncode == 1 and "Traceback" not in closed.stderr
    assert len(closed.stderr.strip().splitlines()) <= 3
