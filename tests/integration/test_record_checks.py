"""What a database writer without the keys can no longer bend, on both stores.

Each test edits the real database with raw SQL, as someone who can write it but holds
neither the chain key nor the encryption keys would: a history copied from another run
(of another tenant), a run's row edited (result, status, input) or copied from another
run, an approval's row edited (policy, data), plaintext written into a sealed column.
`verify`, or the read itself, must refuse each, and never hand out the edited value:
the engine API, the HTTP API and the approval page alike.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import waypost as wp
from tests.helpers import db_query, db_write_all, eventually, of_type
from tests.helpers.cli import waypost_on
from tests.helpers.mail import Mailbox
from waypost.features.senders import FileSender
from waypost.model import operations as ops
from waypost.model.chain import Chain, ChainKey
from waypost.model.identity import Principal, Role

from .server_fixtures import Api, make_key, serve

__all__ = ["serve"]  # the fixture, used by name

pytestmark = pytest.mark.timeout(120)

KEYED = Chain([ChainKey("k1", b"k" * 32)])
MIGRATING = Chain(KEYED.keys, accept_legacy=True)
CHAIN_ENV = "k1:" + base64.urlsafe_b64encode(b"k" * 32).decode()
WAYPOST = Path(sys.executable).parent / "waypost"
KEYS = wp.Keys({"e1": b"e" * 32})


@wp.workflow(name="echoing")
async def echoing(ctx: wp.WorkflowContext, x: Any) -> dict[str, Any]:
    return {"echo": x}


@wp.workflow(name="waiting")
async def waiting(ctx: wp.WorkflowContext, x: Any) -> dict[str, Any]:
    got = await ctx.wait_signal("go")
    return {"x": x, "got": got}


@wp.workflow(name="asking")
async def asking(ctx: wp.WorkflowContext, amount: int) -> str:
    decision = await ctx.approval(
        "pay", approvers=wp.AnyOf(users=["ann"]), expires_in=3600, data={"amount": amount}
    )
    return decision.outcome


def suspended(engine: Any, run_id: str, tenant: str) -> bool:
    rows = db_query(
        engine.url, "SELECT status FROM runs WHERE tenant = ? AND run_id = ?", (tenant, run_id)
    )
    return rows == [("suspended",)]


def row_problems(engine: Any, run_id: str, tenant: str = "default") -> list[str]:
    return [p.problem for p in engine.verify(run_id, tenant=tenant) if p.seq == 0]


# == a history copied into another run ======================================================
@pytest.mark.parametrize("into", ["another tenant", "the same tenant"])
def test_a_history_copied_into_another_run_fails_verify_and_is_never_replayed(
    make_engine: Any, db_url: str, into: str
) -> None:
    engine = make_engine(waiting, chain=KEYED)
    target_tenant = "other" if into == "another tenant" else "acme"
    with engine.running():
        source = engine.start(waiting, "SOURCE", tenant="acme")
        target = engine.start(waiting, "TARGET", tenant=target_tenant)
        for run, tenant in ((source, "acme"), (target, target_tenant)):
            eventually(lambda r=run, t=tenant: engine.get(r.run_id, tenant=t).waiting_for, "wait")
    engine.close()
    copy = (
        ("DELETE FROM events WHERE tenant = ? AND run_id = ?", (target_tenant, target.run_id)),
        (
            "INSERT INTO events (tenant, run_id, seq, type, data, ts, hash) "
            "SELECT ?, ?, seq, type, data, ts, hash FROM events WHERE tenant = ? AND run_id = ?",
            (target_tenant, target.run_id, "acme", source.run_id),
        ),
        (
            "UPDATE runs SET last_seq = (SELECT last_seq FROM runs WHERE tenant = ? AND "
            "run_id = ?), last_hash = (SELECT last_hash FROM runs WHERE tenant = ? AND "
            "run_id = ?) WHERE tenant = ? AND run_id = ?",
            ("acme", source.run_id, "acme", source.run_id, target_tenant, target.run_id),
        ),
    )
    db_write_all(db_url, *copy)

    engine = make_engine(waiting, chain=KEYED)
    problems = engine.verify(target.run_id, tenant=target_tenant)
    assert problems[0].seq == 1
    assert "belongs to another run" in problems[0].problem
    assert engine.verify(source.run_id, tenant="acme") == []
    with engine.running():
        engine.signal(target.run_id, "go", "now", tenant=target_tenant)
        eventually(lambda: suspended(engine, target.run_id, target_tenant), "the suspension")
    info = engine.get(target.run_id, tenant=target_tenant)
    assert info.error is not None and info.error["type"] == "BrokenHistory"
    assert "integrity check at event 1" in info.error["message"]
    history = engine.history(target.run_id, tenant=target_tenant)
    assert of_type(history, "RunCompleted") == []  # the copied history was never fed


# == a run's row edited ======================================================================
def test_an_edited_result_is_refused_by_result_get_http_and_verify(
    make_engine: Any, db_url: str, serve: Any
) -> None:
    engine = make_engine(echoing, chain=KEYED)
    with engine.running():
        run = engine.start(echoing, "real", tenant="acme")
        assert engine.result(run.run_id, tenant="acme", timeout=10) == {"echo": "real"}
        db_write_all(
            db_url,
            (
                "UPDATE runs SET result = ? WHERE tenant = ? AND run_id = ?",
                ('{"echo":"FORGED"}', "acme", run.run_id),
            ),
        )
        with pytest.raises(wp.BrokenRecord, match=r"runs\.status, result, error") as caught:
            engine.result(run.run_id, tenant="acme", timeout=10)
        assert "FORGED" not in str(caught.value)
        with pytest.raises(wp.BrokenRecord):
            engine.get(run.run_id, tenant="acme")
        api = Api(serve(engine), make_key(engine, "acme", "viv", "viewer"))
        for path in (f"/v1/runs/{run.run_id}", f"/v1/runs/{run.run_id}/result"):
            answer = api.get(path)
            assert answer.status_code == 500, path
            assert answer.json()["error"]["code"] == "broken_record"
            assert "FORGED" not in answer.text
    problems = row_problems(engine, run.run_id, "acme")
    assert any("does not match its check" in p for p in problems)
    assert any("its result (runs.result) is not the one event" in p for p in problems)


@pytest.mark.parametrize(
    ("column", "value"),
    [
        pytest.param("status", "completed", id="status"),
        pytest.param("input", '"FORGED"', id="input"),
        pytest.param("workflow", "echoing", id="workflow"),
    ],
)
def test_an_edited_status_or_input_is_refused_and_reported(
    make_engine: Any, db_url: str, column: str, value: str
) -> None:
    engine = make_engine(waiting, chain=KEYED)
    with engine.running():
        run = engine.start(waiting, "real")
        eventually(lambda: engine.get(run.run_id).waiting_for, "the run to wait")
    db_write_all(
        db_url, (f"UPDATE runs SET {column} = ? WHERE run_id = ?", (value, run.run_id))
    )  # fmt: skip
    with pytest.raises(wp.BrokenRecord, match=rf"runs\.{column}"):
        engine.get(run.run_id)
    with pytest.raises(wp.BrokenRecord):
        engine.list_runs()  # a listing hands out none of it either
    problems = row_problems(engine, run.run_id)
    assert any("does not match its check" in p for p in problems), problems
    if column == "input":
        assert any("its input (runs.input) is not the one event 1" in p for p in problems)
    if column == "status":
        assert any("no event ended the run" in p for p in problems)


def test_a_waiting_run_whose_row_was_edited_is_suspended_not_advanced(
    make_engine: Any, db_url: str
) -> None:
    engine = make_engine(waiting, chain=KEYED)
    with engine.running():
        run = engine.start(waiting, "real")
        eventually(lambda: engine.get(run.run_id).waiting_for, "the run to wait")
        sql = "UPDATE runs SET result = ? WHERE run_id = ?"
        db_write_all(db_url, (sql, ('{"x":"FORGED"}', run.run_id)))
        engine.signal(run.run_id, "go", "sent")  # the engine looks at the run again
        eventually(lambda: suspended(engine, run.run_id, "default"), "the suspension")
    info = engine.get(run.run_id)  # the engine wrote the row anew: it reads again
    assert info.status is wp.RunStatus.SUSPENDED and info.result is None
    assert info.error is not None and "BrokenRecord" in info.error["message"]
    history = engine.history(run.run_id)
    assert of_type(history, "RunCompleted") == [] and of_type(history, "RunSuspended")
    assert engine.verify(run.run_id) == []


def test_a_row_copied_from_another_run_with_its_checks_is_refused(
    make_engine: Any, db_url: str
) -> None:
    """The checks name their run: copying another run's result with its check fails."""
    engine = make_engine(echoing, chain=KEYED)
    with engine.running():
        rich = engine.start(echoing, "RICH")
        poor = engine.start(echoing, "poor")
        for run in (rich, poor):
            engine.result(run.run_id, timeout=10)
    db_write_all(
        db_url,
        (
            "UPDATE runs SET result = (SELECT result FROM runs WHERE run_id = ?), state_mac = "
            "(SELECT state_mac FROM runs WHERE run_id = ?) WHERE run_id = ?",
            (rich.run_id, rich.run_id, poor.run_id),
        ),
    )
    with pytest.raises(wp.BrokenRecord, match="does not match its check"):
        engine.result(poor.run_id, timeout=10)
    assert engine.result(rich.run_id, timeout=10) == {"echo": "RICH"}


def test_a_row_stripped_of_its_checks_is_refused_where_legacy_rows_are_not_accepted(
    make_engine: Any, db_url: str
) -> None:
    engine = make_engine(echoing, chain=KEYED)
    with engine.running():
        run = engine.start(echoing, "real")
        engine.result(run.run_id, timeout=10)
    db_write_all(
        db_url,
        (
            "UPDATE runs SET result = ?, input_mac = NULL, state_mac = NULL WHERE run_id = ?",
            ('{"echo":"FORGED"}', run.run_id),
        ),
    )
    with pytest.raises(wp.BrokenRecord, match="carries no check"):
        engine.result(run.run_id, timeout=10)
    # Sealing the legacy row refuses it too: it does not say what its history says.
    report = engine.seal_legacy(run.run_id)
    assert report.rows == 0 and list(report.refused) == [run.run_id]
    assert "its result (runs.result) is not the one event" in report.refused[run.run_id]


def test_a_get_reads_the_row_only_not_the_history(make_engine: Any, db_url: str) -> None:
    """Checking a row costs its own columns: an edit of an event deep in the history is
    found by verify and by replay, not by reading the run (which does not read it)."""
    engine = make_engine(waiting, chain=KEYED)
    with engine.running():
        run = engine.start(waiting, "real")
        engine.signal(run.run_id, "go", "sent")
        engine.result(run.run_id, timeout=10)
    db_write_all(
        db_url,
        ("UPDATE events SET data = ? WHERE run_id = ? AND seq = 2", ("{}", run.run_id)),
    )
    assert engine.get(run.run_id).result == {"x": "real", "got": "sent"}
    assert [p.seq for p in engine.verify(run.run_id)] == [2]


def test_a_finished_run_whose_history_is_cut_short_is_found_by_verify(
    make_engine: Any, db_url: str
) -> None:
    engine = make_engine(waiting, chain=KEYED)
    with engine.running():
        run = engine.start(waiting, "real")
        engine.signal(run.run_id, "go", "sent")
        engine.result(run.run_id, timeout=10)
    history = engine.history(run.run_id)
    end = next(e for e in history if e.type == "RunCompleted")
    before = history[end.seq - 2]
    db_write_all(
        db_url,
        ("DELETE FROM events WHERE run_id = ? AND seq >= ?", (run.run_id, end.seq)),
        (
            "UPDATE runs SET last_seq = ?, last_hash = ? WHERE run_id = ?",
            (before.seq, before.hash, run.run_id),
        ),
    )
    assert row_problems(engine, run.run_id) == [
        "the run's row: its status (runs.status) is completed, but no event ended the run"
    ]


def test_a_run_put_back_whole_to_an_earlier_state_is_not_found(
    make_engine: Any, db_url: str
) -> None:
    """The limit the guarantees state: someone who kept a copy of a run's rows and events
    can put the run back to that state whole (a rollback); nothing in the database
    tells, only an anchor outside it would."""
    engine = make_engine(waiting, chain=KEYED)
    with engine.running():
        run = engine.start(waiting, "real")
        eventually(lambda: engine.get(run.run_id).waiting_for, "the run to wait")
        row = db_query(
            db_url,
            "SELECT status, result, error, waiting_for, last_seq, last_hash, processed_seq, "
            "input_mac, state_mac FROM runs WHERE run_id = ?",
            (run.run_id,),
        )[0]
        engine.signal(run.run_id, "go", "sent")
        engine.result(run.run_id, timeout=10)
    db_write_all(
        db_url,
        ("DELETE FROM events WHERE run_id = ? AND seq > ?", (run.run_id, row[4])),
        (
            "UPDATE runs SET status = ?, result = ?, error = ?, waiting_for = ?, last_seq = ?, "
            "last_hash = ?, processed_seq = ?, input_mac = ?, state_mac = ?, "
            "finished_at = NULL WHERE run_id = ?",
            (*row, run.run_id),
        ),
    )
    assert engine.verify(run.run_id) == []
    assert engine.get(run.run_id).status is wp.RunStatus.WAITING


# == an approval's row edited =================================================================
def asking_engine(make_engine: Any, mailbox: Mailbox, **options: Any) -> Any:
    return make_engine(asking, notifier=FileSender(mailbox.path), chain=KEYED, **options)


def pending(engine: Any, run_id: str) -> wp.ApprovalInfo:
    found: list[wp.ApprovalInfo] = eventually(
        lambda: engine.approvals(run_id=run_id), "the approval"
    )
    return found[0]


def page_token(mailbox: Mailbox, approval_id: str, who: str) -> str:
    link = mailbox.wait(approval_id, who)["approve_url"]
    return str(link).rsplit("/approve/", 1)[1]


@pytest.mark.parametrize("edit", ["policy", "data"])
def test_an_edited_approval_is_refused_on_every_read_and_by_decide(
    make_engine: Any, db_url: str, mailbox: Mailbox, serve: Any, edit: str
) -> None:
    engine = asking_engine(make_engine, mailbox)
    with engine.running():
        run = engine.start(asking, 100)
        approval = pending(engine, run.run_id)
        token = page_token(mailbox, approval.approval_id, "ann")
        if edit == "policy":  # mallory lets herself decide
            forged = {"kind": "any", "users": ["ann", "mallory"], "groups": [], "count": 1}
            sql = "UPDATE approvals SET policy = ? WHERE approval_id = ?"
            db_write_all(db_url, (sql, (json.dumps(forged), approval.approval_id)))
        else:  # what the approver is shown
            sql = "UPDATE approvals SET data = ? WHERE approval_id = ?"
            db_write_all(db_url, (sql, ('{"amount":999999}', approval.approval_id)))

        with pytest.raises(wp.BrokenRecord, match=r"approvals\.data, policy"):
            engine.approval(approval.approval_id)
        for who in ("mallory", "ann"):
            with pytest.raises(wp.BrokenRecord):
                engine.execute(
                    ops.Decide(approval_id=approval.approval_id, decision="approve"),
                    Principal("default", who, frozenset({Role.APPROVER})),
                )
        assert db_query(db_url, "SELECT principal FROM approval_votes") == []

        base = serve(engine)
        api = Api(base, make_key(engine, "default", "ann", "approver"))
        answer = api.get(f"/v1/approvals/{approval.approval_id}")
        assert answer.status_code == 500 and answer.json()["error"]["code"] == "broken_record"
        page = Api(base, None).get(f"/approve/{token}")
        assert page.status_code == 500
        assert "999999" not in page.text and "mallory" not in page.text
    problems = row_problems(engine, run.run_id)
    assert any(p.startswith(f"approval {approval.approval_id!r}") for p in problems), problems


def test_plaintext_written_into_a_sealed_approval_is_refused(
    make_engine: Any, db_url: str, mailbox: Mailbox, serve: Any
) -> None:
    engine = asking_engine(make_engine, mailbox, encryption=KEYS)
    with engine.running():
        run = engine.start(asking, 100)
        approval = pending(engine, run.run_id)
        token = page_token(mailbox, approval.approval_id, "ann")
        stored = db_query(db_url, "SELECT data FROM approvals")[0][0]
        assert stored.startswith("wpe1:e1:")
        db_write_all(
            db_url,
            (
                "UPDATE approvals SET data = ? WHERE approval_id = ?",
                ('{"amount":999999}', approval.approval_id),
            ),
        )
        with pytest.raises(wp.PlaintextRefused, match=r"approvals\.data of approval") as caught:
            engine.approval(approval.approval_id)
        assert "999999" not in str(caught.value)
        page = Api(serve(engine), None).get(f"/approve/{token}")
        assert page.status_code == 500
        assert "999999" not in page.text and "approvals.data" in page.text
        with pytest.raises(wp.PlaintextRefused):
            engine.execute(
                ops.Decide(approval_id=approval.approval_id, decision="approve"),
                Principal("default", "ann", frozenset({Role.APPROVER})),
            )
    assert db_query(db_url, "SELECT principal FROM approval_votes") == []


# == runs written before histories and rows were bound to their run ===========================
def make_legacy(db_url: str, engine: Any, run_id: str) -> None:
    """(`engine` reads the history as it is now, before the rewrite.)"""
    """Rewrite a run as the release before wrote it: its history chained to the empty text,
    its row and its approvals' rows without checks (the editor here holds the key, as
    that release's engine did)."""
    prev = ""
    for ev in engine.history(run_id):
        prev = KEYED.hash(prev, ev.seq, ev.type, ev.ts, ev.data_json)
        sql = "UPDATE events SET hash = ? WHERE run_id = ? AND seq = ?"
        db_write_all(db_url, (sql, (prev, run_id, ev.seq)))
    db_write_all(
        db_url,
        (
            "UPDATE runs SET last_hash = ?, input_mac = NULL, state_mac = NULL WHERE run_id = ?",
            (prev, run_id),
        ),
        ("UPDATE approvals SET mac = NULL WHERE run_id = ?", (run_id,)),
    )


def test_a_legacy_run_runs_while_legacy_is_accepted_and_is_bound_by_seal_legacy(
    make_engine: Any, db_url: str, mailbox: Mailbox
) -> None:
    old = asking_engine(make_engine, mailbox)
    with old.running():
        run = old.start(asking, 100)
        approval = pending(old, run.run_id)
    make_legacy(db_url, old, run.run_id)
    old.close()

    # Strict: the history is not bound to its run, the rows carry no check.
    strict = make_engine(asking, chain=KEYED)
    problems = strict.verify(run.run_id)
    assert problems[0].seq == 1 and problems[0].problem.startswith("legacy genesis")
    assert any("carries no check" in p.problem for p in problems if p.seq == 0)
    with pytest.raises(wp.BrokenRecord, match="seal-legacy"):
        strict.get(run.run_id)
    strict.close()

    # While migrating (WAYPOST_CHAIN_ACCEPT_LEGACY=1), the run reads and verifies as it is.
    migrating = make_engine(asking, chain=MIGRATING)
    assert migrating.verify(run.run_id) == []
    assert migrating.get(run.run_id).status is wp.RunStatus.WAITING
    assert migrating.approval(approval.approval_id).data == {"amount": 100}
    dry = migrating.seal_legacy(run.run_id, dry_run=True)
    assert (dry.runs, dry.rehashed, dry.rows, dry.refused) == (1, 1, 2, {})
    migrating.close()

    # A key holder binds it; then the strict engine reads, verifies and runs it.
    sealer = make_engine(asking, chain=KEYED)
    done = sealer.seal_legacy()
    assert (done.runs, done.rehashed, done.rows, done.refused, done.next_after) == (
        1,
        1,
        2,
        {},
        None,
    )
    assert sealer.seal_legacy(run.run_id).rehashed == 0  # once is enough
    assert sealer.verify(run.run_id) == []
    with sealer.running():
        sealer.execute(
            ops.Decide(approval_id=approval.approval_id, decision="approve"),
            Principal("default", "ann", frozenset({Role.APPROVER})),
        )
        assert sealer.result(run.run_id, timeout=10) == "approved"
    assert sealer.verify(run.run_id) == []


def test_seal_legacy_leaves_a_run_that_does_not_verify_as_it_is(
    make_engine: Any, db_url: str
) -> None:
    engine = make_engine(waiting, chain=KEYED)
    with engine.running():
        good = engine.start(waiting, "good")
        bad = engine.start(waiting, "bad")
        for run in (good, bad):
            eventually(lambda r=run: engine.get(r.run_id).waiting_for, "the run to wait")
    for run in (good, bad):
        make_legacy(db_url, engine, run.run_id)
    # An edit of the legacy history (the editor has no key) is not sealed as if good.
    sql = "UPDATE events SET data = ? WHERE run_id = ? AND seq = 1"
    forged = '{"input":"FORGED","version":"","workflow":"waiting"}'
    db_write_all(db_url, (sql, (forged, bad.run_id)))
    report = engine.seal_legacy()
    assert (report.runs, report.rehashed) == (2, 1)
    assert list(report.refused) == [bad.run_id]
    assert "its history fails at event 1" in report.refused[bad.run_id]
    assert engine.verify(good.run_id) == []
    assert engine.verify(bad.run_id) != []


def test_the_cli_seals_legacy_runs_and_names_those_it_leaves(make_engine: Any, db_url: str) -> None:
    engine = make_engine(waiting, chain=KEYED)
    with engine.running():
        runs = [engine.start(waiting, n) for n in range(3)]
        for run in runs:
            eventually(lambda r=run: engine.get(r.run_id).waiting_for, "the run to wait")
    for run in runs:
        make_legacy(db_url, engine, run.run_id)
    engine.close()
    keyed = {**os.environ, "WAYPOST_CHAIN_KEYS": CHAIN_ENV}
    keyless = {k: v for k, v in os.environ.items() if not k.startswith("WAYPOST_CHAIN")}

    def cli(*args: str, env: dict[str, str] = keyed) -> subprocess.CompletedProcess[str]:
        return waypost_on(db_url, "runs", *args, env=env)

    legacy = cli("verify", runs[0].run_id)
    assert legacy.returncode == 1 and "legacy genesis" in legacy.stderr
    assert "carries no check" in legacy.stderr
    refused = cli("seal-legacy", "--all", env=keyless)
    assert refused.returncode == 1 and "needs the chain key" in refused.stderr
    dry = cli("seal-legacy", "--all", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.startswith("would seal 3 histories and 3 rows in 3 runs")
    done = cli("seal-legacy", "--all", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "tenant": "default",
        "dry_run": False,
        "runs": 3,
        "rehashed": 3,
        "rows": 3,
        "refused": {},
    }
    verified = cli("verify", runs[0].run_id)
    assert verified.returncode == 0 and "history intact" in verified.stdout
    usage = cli("seal-legacy")
    assert usage.returncode == 2 and "--run RUN_ID or --all" in usage.stderr
