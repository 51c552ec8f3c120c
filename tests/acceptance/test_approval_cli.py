"""A purchase that any two managers approve, end to end through the command line.

Real processes on both stores: `waypost groups add`, a `waypost worker` that sends
notifications to a file, `waypost start`, `waypost approvals list`, `waypost approve`
and `reject`, then `waypost runs show`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import waypost as wp
from tests.helpers import eventually

ROOT = Path(__file__).resolve().parents[2]
WAYPOST = Path(sys.executable).with_name("waypost")
pytestmark = pytest.mark.timeout(180)


def waypost(*args: str, env: dict[str, str], ok: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [str(WAYPOST), *args], capture_output=True, text=True, timeout=60, env=env, check=False
    )
    if ok:
        assert proc.returncode == 0, proc.stderr
    return proc


def notes_by_approver(mail: Path, managers: int) -> dict[str, dict[str, Any]]:
    """The notification of each manager, by approver, once all `managers` have one."""

    def notes() -> dict[str, dict[str, Any]] | None:
        if not mail.exists():
            return None
        found = {n["approver"]: n for n in map(json.loads, mail.read_text().splitlines())}
        return found if len(found) == managers else None

    by: dict[str, dict[str, Any]] = eventually(notes, "a notification for each manager", timeout=30)
    return by


def test_any_two_managers_approve_through_the_cli(db_url: str, tmp_path: Path) -> None:
    mail = tmp_path / "notifications.jsonl"
    path = os.pathsep.join(p for p in (str(ROOT / "examples"), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "WAYPOST_DB": db_url, "PYTHONPATH": path}
    assert "3 added" in waypost("groups", "add", "managers", "ann", "bob", "cid", env=env).stdout
    assert waypost("groups", "list", env=env).stdout.splitlines() == [
        "GROUP     MEMBERS",
        "managers  ann, bob, cid",
    ]
    worker = subprocess.Popen(
        [str(WAYPOST), "worker", "--app", "purchase_approval", "--notify", f"file:{mail}"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        payload = json.dumps({"item": "laptop", "cents": 189900})
        started = waypost(
            "start",
            "purchase",
            payload,
            "--app",
            "purchase_approval",
            "--started-by",
            "eve",
            env=env,
        )
        run_id = started.stdout.strip()

        by = notes_by_approver(mail, 3)
        approval_id = by["ann"]["approval_id"]
        listed = json.loads(waypost("approvals", "list", "--as", "ann", "--json", env=env).stdout)
        assert [a["approval_id"] for a in listed] == [approval_id]
        assert listed[0]["data"] == {"item": "laptop", "cents": 189900}
        assert (
            json.loads(waypost("approvals", "list", "--as", "eve", "--json", env=env).stdout) == []
        )

        def decide(action: str, who: str, token: str, *more: str, ok: bool = True) -> Any:
            return waypost(
                action, approval_id, "--token", token, "--as", who, *more, env=env, ok=ok
            )

        first = decide("approve", "ann", by["ann"]["approve_token"])
        assert "waits for more decisions" in first.stdout
        stolen = decide("approve", "eve", by["bob"]["approve_token"], ok=False)
        assert stolen.returncode == 1 and "refused" in stolen.stderr
        second = decide("approve", "bob", by["bob"]["approve_token"], "--comment", "ok")
        assert "the approval is approved" in second.stdout
        late = decide("reject", "cid", by["cid"]["reject_token"], "--comment", "too late", ok=False)
        assert late.returncode == 1

        def finished() -> dict[str, Any] | None:
            shown = json.loads(waypost("runs", "show", run_id, "--json", env=env).stdout)
            return shown if shown["status"] == "completed" else None

        shown = eventually(finished, "the run to complete", timeout=30)
        assert shown["result"] == {"status": "order for laptop placed", "by": ["ann", "bob"]}
        history = [
            json.loads(line)
            for line in waypost("runs", "history", run_id, env=env).stdout.splitlines()
        ]
        refused = [e for e in history if e["type"] == "ApprovalRefused"]
        assert {e["data"]["principal"] for e in refused} == {"eve", "cid"}
        assert all(e["data"]["auth"] == "cli" for e in refused)
        assert waypost("runs", "verify", run_id, env=env).returncode == 0
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.communicate()


@wp.workflow(name="cli_purchase")
async def cli_purchase(ctx: wp.WorkflowContext, req: dict[str, Any]) -> str:
    decision = await ctx.approval(
        "manager", approvers=wp.Quorum(2, group="managers"), expires_in=3600
    )
    return decision.outcome


def test_a_refused_decision_prints_the_answer_and_nothing_else(db_url: str, tmp_path: Path) -> None:
    mail = tmp_path / "notifications.jsonl"
    env = {**os.environ, "WAYPOST_DB": db_url}
    with wp.Engine(db_url, notifier=wp.FileSender(mail), poll_interval=0.05) as engine:
        engine.register(cli_purchase)
        engine.add_to_group("managers", ["ann", "bob"])
        with engine.running():
            run = engine.start(cli_purchase, {}, started_by="eve")

            by = notes_by_approver(mail, 2)
        approval_id = by["ann"]["approval_id"]
        answer = f"refused: {wp.InvalidCredential()}\n"
        attempts = [
            ("approve", by["bob"]["approve_token"], "eve"),  # bob's credential, eve's name
            ("approve", by["bob"]["reject_token"], "bob"),  # the wrong action
            ("reject", "nope.nope", "mallory"),  # made up
            ("approve", "\x1b]0;owned\x07.x", "mallory"),  # made up, with control characters
        ]
        for action, token, who in attempts:
            refused = waypost(
                action,
                approval_id,
                "--token",
                token,
                "--as",
                who,
                "--comment",
                "why not",
                env=env,
                ok=False,
            )
            assert refused.returncode == 1
            assert (refused.stdout, refused.stderr) == ("", answer)
        # A comment with control characters is refused by the door, before anything counts.
        bad = waypost(
            "reject",
            approval_id,
            "--token",
            by["ann"]["reject_token"],
            "--as",
            "ann",
            "--comment",
            "fine\x1b[2J\x1b[Happroved by the CFO",
            env=env,
            ok=False,
        )
        assert bad.returncode != 0 and "control character (U+001B)" in bad.stderr
        assert "\x1b" not in bad.stderr
        assert engine.approval(approval_id).votes == []
        ok = waypost(
            "approve", approval_id, "--token", by["ann"]["approve_token"], "--as", "ann", env=env
        )
        assert ok.stderr == "" and "waits for more decisions" in ok.stdout
        history = engine.history(run.run_id)
        refused_events = [e.data for e in history if e.type == "ApprovalRefused"]
        assert {e["principal"] for e in refused_events} == {"eve", "bob", "mallory"}
        assert not any("bob" in e["reason"] for e in refused_events if e["principal"] == "eve")
        shown = json.loads(waypost("approvals", "show", approval_id, "--json", env=env).stdout)
        assert sum(r["count"] for r in shown["refusals"]) == len(attempts)
