"""Payload encryption at rest on both stores: what the raw database holds, key rotation,
re-encryption through every door, and the hash chain before and after."""

from __future__ import annotations

import base64
import os
import secrets
import subprocess
import sys
import threading
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import waypost as wp
from tests.helpers import db_query, db_write, eventually, pg_connect
from tests.helpers.cli import waypost_on
from tests.helpers.gates import gate
from waypost.model import operations as ops
from waypost.model.encryption import sealed_key_id
from waypost.model.identity import Principal, Role

from .server_fixtures import Api, make_key, serve

__all__ = ["serve"]  # the fixture, used by name

pytestmark = pytest.mark.timeout(120)

WAYPOST = Path(sys.executable).with_name("waypost")
K1 = secrets.token_bytes(32)
KEYED_CHAIN = wp.Chain([wp.ChainKey("c1", secrets.token_bytes(32))])
K2 = secrets.token_bytes(32)
MARKERS = (
    "MARKER-INPUT",
    "MARKER-ARGS",
    "MARKER-HEARTBEAT",
    "MARKER-RESULT",
    "MARKER-SIGNAL",
    "MARKER-RUNRESULT",
    "MARKER-ERROR",
    "MARKER-APPROVAL",
)
_lock = threading.Lock()


@wp.activity(retry=wp.Retry(max_attempts=2, initial_interval=timedelta(milliseconds=10)))
def enc_charge(ctx: wp.ActivityContext, order: dict[str, Any], label: str) -> dict[str, Any]:
    ctx.heartbeat({"progress": "MARKER-HEARTBEAT"})
    if ctx.attempt == 1:
        raise RuntimeError("the first attempt fails, so its heartbeat is kept for the next")
    if not gate(label).wait(30):
        raise RuntimeError("the test never opened the gate")
    return {"receipt": "MARKER-RESULT", "card": order["card"]}


@wp.activity(retry=wp.Retry(max_attempts=1))
def enc_boom(ctx: wp.ActivityContext, what: str) -> None:
    raise RuntimeError(f"MARKER-ERROR {what}")


@wp.workflow(name="enc_order")
async def enc_order(ctx: wp.WorkflowContext, order: dict[str, Any]) -> dict[str, Any]:
    receipt = await ctx.run(enc_charge, {"card": "MARKER-ARGS"}, order["label"])
    shipped = await ctx.wait_signal("shipped")
    return {"receipt": receipt, "shipped": shipped, "done": "MARKER-RUNRESULT"}


@wp.workflow(name="enc_approval")
async def enc_approval(ctx: wp.WorkflowContext, _: Any) -> str:
    decision = await ctx.approval(
        "check",
        approvers=wp.AnyOf(users=["dora"]),
        expires_in=3600,
        data={"note": "MARKER-APPROVAL"},
    )
    return str(decision.outcome)


@wp.workflow(name="enc_fails")
async def enc_fails(ctx: wp.WorkflowContext, what: str) -> None:
    await ctx.run(enc_boom, what)


@wp.workflow(name="enc_echo")
async def enc_echo(ctx: wp.WorkflowContext, value: Any) -> Any:
    got = await ctx.wait_signal("go")
    return {"value": value, "got": got}


def b64(key: bytes) -> str:
    return base64.b64encode(key).decode()


def raw_dump(db_url: str) -> bytes:
    """Everything the database holds, as the bytes an attacker with the files would see."""
    if db_url.startswith("sqlite:///"):
        path = db_url.removeprefix("sqlite:///")
        return b"".join(Path(p).read_bytes() for p in (path, path + "-wal") if os.path.exists(p))
    with pg_connect(db_url) as pg:
        tables = [
            r[0]
            for r in pg.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'waypost'"
            ).fetchall()
        ]
        assert "events" in tables and "runs" in tables
        out = []
        for table in tables:
            for (text,) in pg.execute(f'SELECT t::text FROM waypost."{table}" t').fetchall():
                out.append(text.encode())
        return b"\n".join(out)


def stored_key_ids(db_url: str) -> set[str]:
    """How each stored payload is kept: the key id of its ciphertext, or "plain"."""
    texts = [r[0] for r in db_query(db_url, "SELECT data FROM events")]
    for row in db_query(db_url, "SELECT input, result, error FROM runs"):
        texts.extend(row)
    for row in db_query(db_url, "SELECT spec, heartbeat_details FROM tasks"):
        texts.extend(row)
    texts.extend(r[0] for r in db_query(db_url, "SELECT data FROM approvals"))
    return {sealed_key_id(t) or "plain" for t in texts if t is not None}


def test_the_raw_database_holds_no_plaintext_of_encrypted_payloads(
    make_engine: Any, db_url: str
) -> None:
    label = uuid.uuid4().hex[:12]
    engine = make_engine(
        enc_order,
        enc_charge,
        enc_approval,
        enc_fails,
        enc_boom,
        encryption=wp.Keys({"k1": K1}),
    )
    order_id = f"plain-MARKERID-{label}"
    with engine.running():
        engine.start(enc_order, {"card": "MARKER-INPUT", "label": label}, run_id=order_id)
        asked = engine.start(enc_approval, None)
        failing = engine.start(enc_fails, "x")
        # The second attempt is running: its arguments and the heartbeat details are stored.
        in_attempt = "SELECT attempt, heartbeat_details FROM tasks WHERE run_id = ? AND kind = ?"
        eventually(
            lambda: (
                [
                    (n, d is not None)
                    for n, d in db_query(db_url, in_attempt, (order_id, "activity"))
                ]
                == [(2, True)]
            ),
            "the second attempt to run",
        )
        eventually(lambda: engine.approvals(), "the approval to be asked")
        with pytest.raises(wp.WorkflowFailed):
            engine.result(failing.run_id, timeout=10)
        in_flight = raw_dump(db_url)
        gate(label).set()
        engine.signal(order_id, "shipped", {"tracking": "MARKER-SIGNAL"})
        result = engine.result(order_id, timeout=10)
    assert result["done"] == "MARKER-RUNRESULT" and result["shipped"]["tracking"] == "MARKER-SIGNAL"
    finished = raw_dump(db_url)
    for dump in (in_flight, finished):
        # The search works: what is not encrypted (a run id) is found.
        assert b"MARKERID" in dump
        for marker in MARKERS:
            assert marker.encode() not in dump, f"{marker} is stored in plaintext"
    assert stored_key_ids(db_url) == {"k1"}

    # Above the store everything reads as plaintext, and the chain verifies.
    seen = repr(engine.history(order_id)) + repr(engine.history(failing.run_id))
    for marker in ("MARKER-INPUT", "MARKER-ARGS", "MARKER-RESULT", "MARKER-SIGNAL", "MARKER-ERROR"):
        assert marker in seen
    assert engine.approvals()[0].data == {"note": "MARKER-APPROVAL"}
    assert "MARKER-INPUT" in repr(engine.get(order_id))
    for run_id in (order_id, asked.run_id, failing.run_id):
        assert engine.verify(run_id) == []


@wp.workflow(name="enc_generations")
async def enc_generations(ctx: wp.WorkflowContext, state: dict[str, Any]) -> dict[str, Any]:
    """Goes on as a new generation twice, each with a secret of its own, then waits."""
    n = state["n"]
    if n < 3:
        ctx.continue_as_new({**state, "n": n + 1, "secret": f"MARKER-GEN{n + 1}-{state['label']}"})
    got = await ctx.wait_signal("last")
    return {"n": n, "secret": state["secret"], "got": got}


def test_a_run_continuing_as_new_under_encryption_completes_and_stores_no_plaintext(
    make_engine: Any, db_url: str
) -> None:
    label = uuid.uuid4().hex[:12]
    engine = make_engine(enc_generations, encryption=wp.Keys({"k1": K1}), chain=KEYED_CHAIN)
    with engine.running():
        run = engine.start(enc_generations, {"n": 1, "label": label, "secret": "MARKER-GEN1"})
        info = eventually(
            lambda: (i := engine.get(run.run_id)).waiting_for and i, "the third generation"
        )
        assert info.input["n"] == 3 and info.input["secret"] == f"MARKER-GEN3-{label}"
        engine.signal(run.run_id, "last", f"MARKER-SIGNAL-{label}")
        assert engine.result(run.run_id, timeout=10) == {
            "n": 3,
            "secret": f"MARKER-GEN3-{label}",
            "got": f"MARKER-SIGNAL-{label}",
        }
    history = engine.history(run.run_id)
    assert history[0].data["generation"] == 3 and history[0].data["input"]["n"] == 3
    assert engine.verify(run.run_id) == []
    assert stored_key_ids(db_url) == {"k1"}
    dump = raw_dump(db_url)
    assert label.encode() not in dump and b"MARKER-GEN" not in dump


def test_keys_rotate_and_re_encryption_keeps_the_chain(make_engine: Any, db_url: str) -> None:
    first = make_engine(enc_echo, encryption=wp.Keys({"k1": K1}))
    with first.running():
        done = [first.start(enc_echo, {"n": i, "secret": "MARKER-INPUT"}) for i in range(3)]
        for run in done:
            first.signal(run.run_id, "go", i := {"s": "MARKER-SIGNAL"})
            assert first.result(run.run_id, timeout=10)["got"] == i
        waiting = first.start(enc_echo, "still waiting")
        eventually(lambda: first.get(waiting.run_id).waiting_for, "the run to wait")
    first.close()
    assert stored_key_ids(db_url) == {"k1"}

    rotated = make_engine(enc_echo, encryption=wp.Keys({"k2": K2, "k1": K1}))
    run_ids = sorted(r.run_id for r in [*done, waiting])
    assert rotated.get(done[0].run_id).result["value"]["secret"] == "MARKER-INPUT"
    hashes = {rid: [e.hash for e in rotated.history(rid)] for rid in run_ids}

    dry = rotated.reencrypt(limit=3, dry_run=True)
    assert (dry.runs, dry.key, dry.dry_run, dry.next_after) == (3, "k2", True, run_ids[2])
    assert dry.resealed == dry.values > 0
    assert stored_key_ids(db_url) == {"k1"}  # a dry run writes nothing

    total, after, batches = 0, None, 0
    while True:
        report = rotated.reencrypt(after=after, limit=3)
        total += report.runs
        batches += 1
        after = report.next_after
        if after is None:
            break
    assert (total, batches) == (4, 2)
    assert stored_key_ids(db_url) == {"k2"}
    assert rotated.reencrypt(waiting.run_id).resealed == 0  # nothing left under k1
    for rid in run_ids:
        assert rotated.verify(rid) == []
        assert [e.hash for e in rotated.history(rid)] == hashes[rid]

    # The old key can go: the new one alone reads every run, and they go on.
    only_new = make_engine(enc_echo, encryption=wp.Keys({"k2": K2}))
    with only_new.running():
        only_new.signal(waiting.run_id, "go", "late")
        assert only_new.result(waiting.run_id, timeout=10) == {
            "value": "still waiting",
            "got": "late",
        }
    for rid in run_ids:
        assert only_new.verify(rid) == []
    assert stored_key_ids(db_url) == {"k2"}


def test_plaintext_from_before_encryption_is_read_and_re_encrypted_in_the_migration_mode(
    make_engine: Any, db_url: str
) -> None:
    plain = make_engine(enc_echo)
    with plain.running():
        run = plain.start(enc_echo, "MARKER-INPUT")
        plain.signal(run.run_id, "go", "MARKER-SIGNAL")
        assert plain.result(run.run_id, timeout=10)["got"] == "MARKER-SIGNAL"
    assert stored_key_ids(db_url) == {"plain"}
    assert b"MARKER-SIGNAL" in raw_dump(db_url)

    # Once keys are set, plaintext is refused, and not sealed by re-encryption either.
    keyed = make_engine(enc_echo, encryption=wp.Keys({"k1": K1}))
    for refused in (keyed.get, keyed.reencrypt):
        with pytest.raises(wp.PlaintextRefused, match="WAYPOST_ENCRYPTION_ACCEPT_PLAINTEXT"):
            refused(run.run_id)
    assert stored_key_ids(db_url) == {"plain"}

    migrating = make_engine(enc_echo, encryption=wp.Keys({"k1": K1}, accept_plaintext=True))
    assert migrating.get(run.run_id).result == {"value": "MARKER-INPUT", "got": "MARKER-SIGNAL"}
    report = migrating.reencrypt(run.run_id)
    assert report.runs == 1 and report.resealed == report.values > 0
    assert stored_key_ids(db_url) == {"k1"}
    assert keyed.verify(run.run_id) == []
    assert keyed.get(run.run_id).result == {"value": "MARKER-INPUT", "got": "MARKER-SIGNAL"}


def test_a_missing_key_is_named_and_changes_nothing(make_engine: Any, db_url: str) -> None:
    engine = make_engine(enc_echo, encryption=wp.Keys({"k1": K1}))
    with engine.running():
        run = engine.start(enc_echo, "MARKER-INPUT")
        eventually(lambda: engine.get(run.run_id).waiting_for, "the run to wait")
    stored = db_query(db_url, "SELECT data FROM events WHERE seq = 1")[0][0]
    for keys in (wp.Keys({"k9": K2}), None):
        other = make_engine(enc_echo, encryption=keys)
        for read in (other.get, other.history, other.verify):
            with pytest.raises(wp.EncryptionKeyMissing) as err:
                read(run.run_id)
            message = str(err.value)
            assert "'k1'" in message and err.value.key_id == "k1"
            assert "MARKER" not in message and stored[8:] not in message
        if keys is not None:
            with pytest.raises(wp.EncryptionKeyMissing):
                other.reencrypt(run.run_id)
    with engine.running():
        engine.signal(run.run_id, "go", "x")
        assert engine.result(run.run_id, timeout=10) == {"value": "MARKER-INPUT", "got": "x"}
    assert engine.verify(run.run_id) == []
    statuses = [e.type for e in engine.history(run.run_id)]
    assert "RunSuspended" not in statuses


def test_a_ciphertext_moved_to_another_run_is_refused(make_engine: Any, db_url: str) -> None:
    engine = make_engine(enc_echo, encryption=wp.Keys({"k1": K1}))
    with engine.running():
        a = engine.start(enc_echo, "MARKER-A")
        b = engine.start(enc_echo, "MARKER-B")
        for run in (a, b):
            eventually(lambda r=run: engine.get(r.run_id).waiting_for, "the run to wait")
    event_a = db_query(db_url, "SELECT data FROM events WHERE run_id = ? AND seq = 1", (a.run_id,))
    db_write(
        db_url, "UPDATE events SET data = ? WHERE run_id = ? AND seq = 1", (event_a[0][0], b.run_id)
    )
    problems = engine.verify(b.run_id)
    assert {p.seq for p in problems} == {1}  # unreadable there, so its hash fails too
    assert any("hash does not match" in p.problem for p in problems)
    assert engine.verify(a.run_id) == []
    fresh = make_engine(enc_echo, encryption=wp.Keys({"k1": K1}))  # no cached instance
    with fresh.running():
        fresh.signal(b.run_id, "go", "x")  # the run is replayed: its history fails the check
        eventually(lambda: fresh.get(b.run_id).status == "suspended", "the run to be suspended")
    assert "integrity check" in engine.get(b.run_id).error["message"]
    input_a = db_query(db_url, "SELECT input FROM runs WHERE run_id = ?", (a.run_id,))[0][0]
    db_write(db_url, "UPDATE runs SET input = ? WHERE run_id = ?", (input_a, b.run_id))
    with pytest.raises(wp.PayloadTampered) as err:
        engine.get(b.run_id)
    assert "MARKER" not in str(err.value) and "input" in str(err.value)
    # Re-encryption under a new key refuses to seal a forged value again as if it were good.
    rotated = make_engine(enc_echo, encryption=wp.Keys({"k2": K2, "k1": K1}))
    with pytest.raises(wp.PayloadTampered):
        rotated.reencrypt(b.run_id)
    assert rotated.reencrypt(a.run_id).resealed > 0


def test_re_encrypt_is_for_admins_of_the_run_s_tenant_with_bounded_input(
    make_engine: Any,
) -> None:
    engine = make_engine(enc_echo, encryption=wp.Keys({"k1": K1}))
    run = engine.start(enc_echo, None, tenant="acme")
    admin = Principal("acme", "ada", frozenset({Role.ADMIN}))
    assert engine.execute(ops.ReEncrypt(run_id=run.run_id), admin).runs == 1
    for role in (Role.OPERATOR, Role.STARTER, Role.VIEWER, Role.AUDITOR):
        with pytest.raises(wp.PermissionDenied):
            engine.execute(
                ops.ReEncrypt(run_id=run.run_id), Principal("acme", "o", frozenset({role}))
            )
    with pytest.raises(wp.RunNotFound):
        engine.reencrypt(run.run_id, tenant="globex")
    with pytest.raises(wp.RunNotFound):
        engine.reencrypt("no-such-run", tenant="acme")
    assert engine.reencrypt(tenant="globex").runs == 0  # --all sees only the tenant's runs
    for bad in ("", "a\x00b", "a\u202eb", "x" * 100_000):
        with pytest.raises(wp.InvalidRequest) as err:
            engine.reencrypt(bad, tenant="acme")
        assert len(str(err.value)) < 300
    for limit in (0, 1001, True, "5"):
        with pytest.raises(wp.InvalidRequest, match="limit"):
            engine.reencrypt(limit=limit, tenant="acme")
    with pytest.raises(wp.InvalidRequest, match="not both"):
        engine.reencrypt(run.run_id, after="a", tenant="acme")
    with pytest.raises(wp.InvalidRequest, match="dry_run"):
        engine.reencrypt(run.run_id, dry_run="yes", tenant="acme")  # type: ignore[arg-type]
    without_keys = make_engine(enc_echo)
    with pytest.raises(wp.ConfigurationError, match="needs encryption keys"):
        without_keys.reencrypt(run.run_id, tenant="acme")


def test_the_cli_re_encrypts_with_progress(make_engine: Any, db_url: str) -> None:
    engine = make_engine(enc_echo, encryption=wp.Keys({"k1": K1}))
    runs = [engine.start(enc_echo, {"n": i}) for i in range(3)]
    engine.schedule(enc_echo, id="hourly", every=3600, input="MARKER-SCHED")
    rotated = {**os.environ, "WAYPOST_ENCRYPTION_KEYS": f"k2:{b64(K2)},k1:{b64(K1)}"}
    bare = {k: v for k, v in os.environ.items() if not k.startswith("WAYPOST_ENCRYPTION")}

    def cli(*args: str, env: dict[str, str] = rotated) -> subprocess.CompletedProcess[str]:
        return waypost_on(db_url, "runs", *args, env=env)

    dry = cli("re-encrypt", "--all", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.startswith("would re-encrypt ") and "in 3 runs" in dry.stdout
    assert "and 1 of 1 schedule inputs" in dry.stdout
    assert "batch 1: 3 runs" in dry.stderr
    assert stored_key_ids(db_url) == {"k1"}
    done = cli("re-encrypt", "--all", "--json")
    assert done.returncode == 0, done.stderr
    assert '"key": "k2"' in done.stdout and '"runs": 3' in done.stdout
    assert '"schedules_resealed": 1' in done.stdout
    assert stored_key_ids(db_url) == {"k2"}
    one = cli("re-encrypt", "--run", runs[0].run_id)
    assert one.returncode == 0 and one.stdout.startswith("re-encrypted 0 of ")
    verified = cli("verify", runs[0].run_id)
    assert verified.returncode == 0 and "history intact" in verified.stdout
    for args in (("re-encrypt",), ("re-encrypt", "--all", "--run", runs[0].run_id)):
        refused = cli(*args)
        assert refused.returncode == 2 and "--run RUN_ID or --all" in refused.stderr
    keyless = cli("re-encrypt", "--all", env=bare)
    assert keyless.returncode == 1 and "needs encryption keys" in keyless.stderr
    unreadable = cli("show", runs[0].run_id, env=bare)
    assert unreadable.returncode == 1 and "'k2'" in unreadable.stderr


def test_the_read_only_reader_of_deploy_checks_opens_payloads_with_the_keys(
    make_engine: Any, db_url: str
) -> None:
    from waypost.store.readonly import open_reader

    engine = make_engine(enc_echo, encryption=wp.Keys({"k1": K1}))
    run = engine.start(enc_echo, "MARKER-INPUT")
    with open_reader(db_url, wp.Keys({"k1": K1})) as reader:
        record, history = reader.load_run("default", run.run_id)
    assert record is not None and record.input == "MARKER-INPUT"
    assert history[0].data["input"] == "MARKER-INPUT" and engine.verify(run.run_id) == []
    with open_reader(db_url) as keyless, pytest.raises(wp.EncryptionKeyMissing, match="'k1'"):
        keyless.load_run("default", run.run_id)


def test_over_http_an_admin_re_encrypts_and_an_operator_may_not(
    make_engine: Any, serve: Any, db_url: str
) -> None:
    first = make_engine(enc_echo, encryption=wp.Keys({"k1": K1}))
    run = first.start(enc_echo, {"card": "MARKER-INPUT"}, tenant="acme")
    engine = make_engine(enc_echo, encryption=wp.Keys({"k2": K2, "k1": K1}))
    base = serve(engine)
    admin = Api(base, make_key(engine, "acme", "ada", "admin"))
    operator = Api(base, make_key(engine, "acme", "olga", "operator"))
    outsider = Api(base, make_key(engine, "globex", "gus", "admin"))
    path = "/v1/encryption/re-encrypt"
    assert operator.post(path, json={"run_id": run.run_id}).status_code == 403
    hidden = outsider.post(path, json={"run_id": run.run_id})
    assert hidden.status_code == 404, hidden.text
    for bad in ({"run_id": ""}, {"limit": 0}, {"limit": "x"}, {"dry_run": "maybe"}, {"x": 1}):
        assert admin.post(path, json=bad).status_code == 422, bad
    dry = admin.post(path, json={"dry_run": True})
    assert dry.status_code == 200, dry.text
    assert dry.json()["runs"] == 1 and dry.json()["dry_run"] is True
    assert stored_key_ids(db_url) == {"k1"}
    done = admin.post(path, json={"run_id": run.run_id})
    assert done.status_code == 200 and done.json()["key"] == "k2" and done.json()["resealed"] > 0
    assert stored_key_ids(db_url) == {"k2"}
    assert done.json()["next_after"] is None
    assert engine.verify(run.run_id, tenant="acme") == []


def schedule_key_ids(db_url: str) -> dict[tuple[str, str], str]:
    """How each schedule's input is kept, by tenant and schedule id."""
    rows = db_query(db_url, "SELECT tenant, schedule_id, input FROM schedules")
    return {(r[0], r[1]): sealed_key_id(r[2]) or "plain" for r in rows}


def test_re_encryption_reseals_schedule_inputs_so_the_old_key_can_go(
    make_engine: Any, db_url: str
) -> None:
    first = make_engine(enc_echo, encryption=wp.Keys({"k1": K1}))
    first.schedule(enc_echo, id="nightly", every=3600, input="MARKER-SCHED", tenant="acme")
    first.schedule(enc_echo, id="theirs", every=3600, input="MARKER-OTHER", tenant="globex")
    run = first.start(enc_echo, "a run", tenant="acme")
    first.close()
    assert set(schedule_key_ids(db_url).values()) == {"k1"}

    rotated = make_engine(enc_echo, encryption=wp.Keys({"k2": K2, "k1": K1}))
    dry = rotated.reencrypt(limit=10, dry_run=True, tenant="acme")
    assert (dry.schedules, dry.schedules_resealed) == (1, 1)
    assert set(schedule_key_ids(db_url).values()) == {"k1"}  # a dry run writes nothing
    # One run, or a later batch of the walk, leaves the schedules alone.
    one = rotated.reencrypt(run.run_id, tenant="acme")
    later = rotated.reencrypt(after=run.run_id, tenant="acme")
    assert (one.schedules, later.schedules) == (0, 0)
    assert set(schedule_key_ids(db_url).values()) == {"k1"}
    report = rotated.reencrypt(limit=10, tenant="acme")
    assert (report.schedules, report.schedules_resealed, report.key) == (1, 1, "k2")
    # only the acme tenant's: globex's is its admin's to re-encrypt
    assert schedule_key_ids(db_url) == {("acme", "nightly"): "k2", ("globex", "theirs"): "k1"}
    again = rotated.reencrypt(limit=10, tenant="acme")
    assert (again.schedules, again.schedules_resealed) == (1, 0)
    assert b"MARKER-SCHED" not in raw_dump(db_url)

    # The old key retired: the schedule's input reads back, and its fires run with it.
    only_new = make_engine(enc_echo, encryption=wp.Keys({"k2": K2}))
    assert only_new.describe_schedule("nightly", tenant="acme").input == "MARKER-SCHED"
    with only_new.running():
        filled = only_new.backfill_schedule("nightly", 0, 0, tenant="acme")
        fired = filled.fires[0][1]
        assert fired is not None
        only_new.signal(fired, "go", "now", tenant="acme")
        assert only_new.result(fired, timeout=10, tenant="acme")["value"] == "MARKER-SCHED"
    # what was not re-encrypted names the key it needs
    with pytest.raises(wp.EncryptionKeyMissing, match="k1"):
        only_new.describe_schedule("theirs", tenant="globex")
