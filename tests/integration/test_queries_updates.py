"""Queries and updates on both stores: a query answers the run's current state from a
replay in an engine that did not run it and records nothing; a rejected update leaves
the history untouched; an accepted one is recorded, runs once per update id, survives
the crash of the worker running it, and is reachable from Python, the CLI and HTTP."""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

import waypost as wp
from tests.helpers import eventually, of_type
from tests.helpers.cli import waypost_on
from tests.helpers.threads import in_threads
from tests.helpers.workers import signalled_at_the_end, worker_process
from waypost.errors import (
    InvalidState,
    QueryFailed,
    RunNotActive,
    RunNotFound,
    UpdateFailed,
    UpdateRejected,
    UpdateTimeout,
)
from waypost.testing.invariants import check_invariants

from .server_fixtures import Api, make_key, serve

__all__ = ["serve"]  # the fixture, used by name

pytestmark = pytest.mark.timeout(120)

REPO = Path(__file__).resolve().parents[2]
LEASE = ("--lease", "2")
_lock = threading.Lock()
deposits: dict[str, int] = {}  # label -> executions of `record_deposit`


@wp.activity(name="qu.record_deposit", retry=wp.Retry(initial_interval=timedelta(0)))
def record_deposit(ctx: wp.ActivityContext, label: str, amount: int, folder: str) -> int:
    with _lock:
        deposits[label] = deposits.get(label, 0) + 1
    if folder and ctx.attempt == 1:
        Path(folder, f"attempt-1-pid-{os.getpid()}").write_text(ctx.idempotency_key)
        threading.Event().wait(30)  # the worker process is killed meanwhile
    return amount


@wp.workflow(name="qu.account")
async def account(ctx: wp.WorkflowContext, label: str) -> dict[str, Any]:
    balance = 0
    closed = False
    notes: list[str] = []

    def check_deposit(amount: int, folder: str = "") -> None:
        if not isinstance(amount, int) or amount <= 0:
            raise ValueError(f"a deposit must be a positive whole number, not {amount!r}")
        if closed:
            raise ValueError("the account is closed")

    async def deposit(amount: int, folder: str = "") -> int:
        nonlocal balance
        await ctx.run(record_deposit, label, amount, folder)
        balance += amount
        return balance

    def withdraw(amount: int) -> int:
        nonlocal balance
        if amount > balance:
            raise ValueError(f"cannot withdraw {amount}: the balance is {balance}")
        balance -= amount
        return balance

    def close() -> int:
        nonlocal closed
        closed = True
        return balance

    ctx.set_query("balance", lambda: balance)
    ctx.set_query("notes", lambda since=0: notes[since:])
    ctx.set_query("broken", lambda: 1 / 0)
    ctx.set_query("acting", lambda: ctx.now())
    ctx.set_query("working", lambda: ctx.run(record_deposit, label, 1, ""))
    ctx.set_query("sleeping", lambda: ctx.sleep(5))
    ctx.set_update("deposit", deposit, validator=check_deposit)
    ctx.set_update("withdraw", withdraw)
    ctx.set_update("close", close)
    ctx.on_signal("note", notes.append)
    await ctx.wait_condition(lambda: closed)
    return {"balance": balance, "notes": notes}


@wp.workflow(name="qu.counter")
async def counter(ctx: wp.WorkflowContext, start: dict[str, Any]) -> int:
    count = int(start["count"])
    moving = False

    async def bump(by: int) -> int:
        nonlocal count
        count += await ctx.run(record_deposit, start["label"], by, "")
        return count

    def move(_: Any) -> None:
        nonlocal moving
        moving = True

    ctx.set_query("count", lambda: count)
    ctx.set_update("bump", bump)
    ctx.on_signal("move", move)
    await ctx.wait_condition(lambda: moving)
    if count >= 10:
        return count
    ctx.continue_as_new({"label": start["label"], "count": count})


def executions(label: str) -> int:
    with _lock:
        return deposits.get(label, 0)


def frozen(engine: wp.Engine, run_id: str, tenant: str = "default") -> list[tuple[Any, ...]]:
    """A history as it is stored, to compare byte for byte."""
    return [(e.seq, e.type, e.data, e.hash) for e in engine.history(run_id, tenant=tenant)]


def test_a_query_is_answered_by_replay_in_another_engine_and_records_nothing(
    make_engine: Any, label: str
) -> None:
    runner = make_engine(account, record_deposit)
    reader = make_engine(account, record_deposit)  # never serves: answers by replay
    with runner.running():
        run = runner.start(account, label)
        run.signal("note", "opened")
        runner.update(run.run_id, "deposit", 30)
        run.signal("note", "topped up")
        eventually(lambda: runner.get(run.run_id).last_seq >= 6, "the signals to be taken in")
        before = frozen(runner, run.run_id)
        assert reader.query(run.run_id, "balance") == 30
        assert reader.query(run.run_id, "notes") == ["opened", "topped up"]
        assert reader.query(run.run_id, "notes", 1) == ["topped up"]
        assert frozen(runner, run.run_id) == before
        runner.update(run.run_id, "close")
        assert run.result(timeout=10) == {"balance": 30, "notes": ["opened", "topped up"]}
    # A finished run answers from its history too.
    assert reader.query(run.run_id, "balance") == 30
    assert reader.query(run.run_id, "notes", 1) == ["topped up"]
    assert runner._call(check_invariants(runner.aio.store)) == []
    # An engine without the workflow's code says so, and where to ask instead.
    without_code = make_engine(record_deposit)
    with pytest.raises(
        InvalidState, match=r"does not have the code of workflow 'qu\.account'"
    ) as no:
        without_code.query(run.run_id, "balance")
    assert "engine.register" in str(no.value) and "--app MODULE" in str(no.value)


@contextmanager
def waiting_account(make_engine: Any, label: str) -> Iterator[tuple[Any, Any]]:
    """A running engine and a run of `account` that waits."""
    engine = make_engine(account, record_deposit)
    with engine.running():
        run = engine.start(account, label)
        eventually(lambda: engine.get(run.run_id).status == wp.RunStatus.WAITING, "a wait")
        yield engine, run


def test_a_query_that_raises_acts_or_is_unknown_is_refused_and_records_nothing(
    make_engine: Any, label: str
) -> None:
    with waiting_account(make_engine, label) as (engine, run):
        before = frozen(engine, run.run_id)
        with pytest.raises(QueryFailed, match="raised ZeroDivisionError"):
            engine.query(run.run_id, "broken")
        for acting in ("acting", "working", "sleeping"):
            with pytest.raises(QueryFailed, match="may only read the workflow's state"):
                engine.query(run.run_id, acting)
        with pytest.raises(QueryFailed, match=r"no query 'nope' \(its queries: acting, bal"):
            engine.query(run.run_id, "nope")
        with pytest.raises(QueryFailed, match="raised TypeError"):
            engine.query(run.run_id, "balance", 1, 2)
        with pytest.raises(RunNotFound):
            engine.query(run.run_id, "balance", tenant="other")
        with pytest.raises(wp.InvalidRequest):
            engine.query(run.run_id, "bal\x00ance")
        with pytest.raises(wp.InvalidRequest, match="at most 20 arguments"):
            engine.query(run.run_id, "balance", *range(21))
        assert frozen(engine, run.run_id) == before
        assert engine.get(run.run_id).status == wp.RunStatus.WAITING


def test_a_rejected_update_leaves_the_history_untouched(make_engine: Any, label: str) -> None:
    with waiting_account(make_engine, label) as (engine, run):
        before = frozen(engine, run.run_id)
        with pytest.raises(UpdateRejected, match="must be a positive whole number, not -5"):
            engine.update(run.run_id, "deposit", -5, update_id="bad-1")
        with pytest.raises(UpdateRejected, match=r"no update 'steal' \(its updates: close, dep"):
            engine.update(run.run_id, "steal", 1)
        with pytest.raises(RunNotFound):
            engine.update(run.run_id, "deposit", 5, tenant="other")
        assert frozen(engine, run.run_id) == before
        assert executions(label) == 0
        # The same id, valid now, is a new update: a rejection reserved nothing.
        assert engine.update(run.run_id, "deposit", 5, update_id="bad-1") == 5
        engine.update(run.run_id, "close")  # the run ends
        with pytest.raises(RunNotActive, match="has finished"):
            engine.update(run.run_id, "deposit", 5)


def test_an_update_runs_once_per_update_id_and_answers_its_result(
    make_engine: Any, label: str
) -> None:
    # No cache: every step replays the history, updates included.
    engine = make_engine(account, record_deposit, cache_size=0)
    with engine.running():
        run = engine.start(account, label)
        assert engine.update(run.run_id, "deposit", 10, update_id="d-1") == 10
        assert engine.update(run.run_id, "deposit", 10, update_id="d-1") == 10
        # Concurrent callers with one id: one acceptance, one execution, one result.
        answers: list[Any] = []

        def call() -> None:
            answers.append(engine.update(run.run_id, "deposit", 7, update_id="d-2"))

        in_threads([call] * 4, timeout=30)
        assert answers == [17, 17, 17, 17]
        assert executions(label) == 2
        with pytest.raises(InvalidState, match="was used for update 'deposit'"):
            engine.update(run.run_id, "withdraw", 1, update_id="d-1")
        # A handler that raises fails its update, not the run; its error is recorded.
        with pytest.raises(UpdateFailed, match="cannot withdraw 100: the balance is 17"):
            engine.update(run.run_id, "withdraw", 100, update_id="w-1")
        with pytest.raises(UpdateFailed, match="cannot withdraw 100"):
            engine.update(run.run_id, "withdraw", 100, update_id="w-1")
        assert engine.update(run.run_id, "withdraw", 2) == 15
        assert engine.update(run.run_id, "close", update_id="c-1") == 15
        assert run.result(timeout=10) == {"balance": 15, "notes": []}
    history = engine.history(run.run_id)
    accepted = of_type(history, "UpdateAccepted")
    completed = of_type(history, "UpdateCompleted")
    assert [e.data["update_id"] for e in accepted][:2] == ["d-1", "d-2"]
    assert len(accepted) == len(completed) == 5
    assert [e.data["step"] for e in completed] == [f"u{e.seq}" for e in accepted]
    assert "error" in completed[2].data and "result" not in completed[2].data
    # After the run's end: the result of a recorded update still answers; a new one not.
    assert engine.update(run.run_id, "close", update_id="c-1") == 15
    with pytest.raises(RunNotActive, match="finished"):
        engine.update(run.run_id, "close", update_id="c-2")
    assert engine._call(check_invariants(engine.aio.store)) == []


def test_an_update_not_done_in_time_goes_on_and_answers_later(make_engine: Any, label: str) -> None:
    engine = make_engine(account, record_deposit)
    run = engine.start(account, label)  # not served yet: the handler cannot run
    with pytest.raises(UpdateTimeout, match="ask again with the same update id"):
        engine.update(run.run_id, "deposit", 4, update_id="late", timeout=0.2)
    with engine.running():
        assert engine.update(run.run_id, "deposit", 4, update_id="late") == 4
    assert executions(label) == 1


def test_an_accepted_update_survives_the_crash_of_the_worker_running_it(
    make_engine: Any, db_url: str, tmp_path: Path, label: str
) -> None:
    folder = tmp_path / "markers"
    folder.mkdir()
    engine = make_engine(account, record_deposit)
    run = engine.start(account, label)
    with (tmp_path / "worker.log").open("w") as log:
        worker = worker_process(db_url, __name__, log, *LEASE)
        with signalled_at_the_end(worker):
            with pytest.raises(UpdateTimeout):  # accepted; the worker runs its handler
                engine.update(run.run_id, "deposit", 9, str(folder), update_id="dep", timeout=1)
            first = eventually(
                lambda: [p for p in folder.glob("attempt-1-*") if p.read_text()],
                "the worker to start the update's activity",
                timeout=20,
            )
    assert first[0].name == f"attempt-1-pid-{worker.pid}"
    with engine.running():
        assert engine.update(run.run_id, "deposit", 9, str(folder), update_id="dep") == 9
        assert engine.query(run.run_id, "balance") == 9
    history = engine.history(run.run_id)
    assert len(of_type(history, "UpdateAccepted")) == 1
    (done,) = of_type(history, "UpdateCompleted")
    assert done.data["result"] == 9
    (failed,) = of_type(history, "ActivityFailed")
    assert "lost its worker" in failed.data["error"]["message"]
    assert engine._call(check_invariants(engine.aio.store)) == []


def test_queries_and_updates_over_http_and_the_remote_client(
    make_engine: Any, serve: Any, label: str
) -> None:
    engine = make_engine(account, record_deposit)
    base = serve(engine)
    starter = make_key(engine, "acme", "svc", "starter")
    viewer = make_key(engine, "acme", "eve", "viewer")
    stranger = make_key(engine, "globex", "mallory", "starter", "operator", "viewer")
    with engine.running():
        run = engine.start(account, label, tenant="acme", run_id=f"acct-{label}")
        rid = run.run_id
        with Api(base, starter) as api, Api(base, viewer) as eve, Api(base, stranger) as mal:
            before = frozen(engine, rid, "acme")
            bad = api.post(f"/v1/runs/{rid}/updates/deposit", json={"args": [0]})
            assert bad.status_code == 422
            assert bad.json()["error"]["code"] == "update_rejected"
            assert frozen(engine, rid, "acme") == before
            ok = api.post(
                f"/v1/runs/{rid}/updates/deposit", json={"args": [12], "update_id": "h-1"}
            )
            assert ok.status_code == 200, ok.text
            assert ok.json() == {
                "run_id": rid,
                "update": "deposit",
                "update_id": "h-1",
                "result": 12,
            }
            again = api.post(
                f"/v1/runs/{rid}/updates/deposit", json={"args": [12], "update_id": "h-1"}
            )
            assert again.json()["result"] == 12
            asked = eve.post(f"/v1/runs/{rid}/queries/balance")
            assert asked.status_code == 200
            assert asked.json() == {"run_id": rid, "query": "balance", "result": 12}
            assert eve.post(f"/v1/runs/{rid}/updates/close").status_code == 403
            failed = api.post(f"/v1/runs/{rid}/queries/broken", json={"args": []})
            assert failed.status_code == 422
            assert failed.json()["error"]["code"] == "query_failed"
            assert api.post(f"/v1/runs/{rid}/queries/balance", json={"x": 1}).status_code == 422
            timeout = api.post(f"/v1/runs/{rid}/updates/close", json={"timeout": -1})
            assert timeout.status_code == 422
            for path in ("queries/balance", "updates/close"):
                other = mal.post(f"/v1/runs/{rid}/{path}")
                assert other.status_code == 404, path
                assert other.json()["error"]["code"] == "run_not_found"
        with wp.Client(base, starter) as client:
            assert client.update(rid, "deposit", 3, update_id="r-1") == 15
            assert client.update(rid, "deposit", 3, update_id="r-1") == 15
            assert client.query(rid, "balance") == 15
            with pytest.raises(UpdateRejected, match="positive whole number"):
                client.update(rid, "deposit", "lots")
            with pytest.raises(UpdateFailed, match="cannot withdraw 99"):
                client.update(rid, "withdraw", 99)
            assert client.update(rid, "close") == 15
        assert run.result(timeout=10)["balance"] == 15
    assert executions(label) == 2
    with httpx.Client(base_url=base) as anon:
        assert anon.post(f"/v1/runs/{rid}/queries/balance").status_code == 401


def test_queries_and_updates_from_the_command_line(
    make_engine: Any, db_url: str, label: str
) -> None:
    engine = make_engine(account, record_deposit)

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return waypost_on(db_url, "runs", *args, "--app", __name__, cwd=REPO)

    with engine.running():
        run = engine.start(account, label)
        eventually(lambda: engine.get(run.run_id).status == wp.RunStatus.WAITING, "a wait")
        done = cli("update", run.run_id, "deposit", "--arg", "8", "--update-id", "cli-1")
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "8"
        asked = cli("query", run.run_id, "balance")
        assert asked.returncode == 0, asked.stderr
        assert asked.stdout.strip() == "8"
        refused = cli("update", run.run_id, "deposit", "--arg", "-1")
        assert refused.returncode == 1
        assert "positive whole number" in refused.stderr
        garbled = cli("query", run.run_id, "notes", "--arg", "{nope")
        assert garbled.returncode == 2
        assert "not JSON" in garbled.stderr
    assert executions(label) == 1
    assert len(of_type(engine.history(run.run_id), "UpdateAccepted")) == 1


REPLY = """
name: qu-chase
start: answer
steps:
  answer:
    type: wait
    signal: reply
    output: $.reply
    next: thanks
  thanks: {type: succeed, output: reply.text}
"""


def test_a_definition_run_answers_its_data_to_the_built_in_query(make_engine: Any) -> None:
    engine = make_engine()
    engine.publish(REPLY)
    with engine.running():
        run = engine.start("qu-chase", {"customer": "ada"})
        eventually(lambda: engine.get(run.run_id).status == wp.RunStatus.WAITING, "the wait")
        before = frozen(engine, run.run_id)
        assert engine.query(run.run_id, "data") == {"customer": "ada"}
        assert frozen(engine, run.run_id) == before
        with pytest.raises(UpdateRejected, match=r"no update 'x' \(its updates: none\)"):
            engine.update(run.run_id, "x")
        run.signal("reply", {"text": "thanks"})
        assert run.result(timeout=10) == "thanks"
    assert engine.query(run.run_id, "data") == {"customer": "ada", "reply": {"text": "thanks"}}


def test_updates_in_a_later_generation_number_their_steps_under_it(
    make_engine: Any, label: str
) -> None:
    engine = make_engine(counter, record_deposit)
    with engine.running():
        run = engine.start(counter, {"label": label, "count": 0})
        assert engine.update(run.run_id, "bump", 4, update_id="b-1") == 4
        run.signal("move", None)
        eventually(
            lambda: engine.history(run.run_id)[0].data.get("generation") == 2, "generation 2"
        )
        assert engine.query(run.run_id, "count") == 4
        assert engine.update(run.run_id, "bump", 6, update_id="b-2") == 10
        run.signal("move", None)
        assert run.result(timeout=10) == 10
    history = engine.history(run.run_id)
    (scheduled,) = of_type(history, "ActivityScheduled")
    (completed,) = of_type(history, "UpdateCompleted")
    assert completed.data["step"].startswith("2/u") and scheduled.data["step"].startswith("2/u")
    assert executions(label) == 2  # one per update; the keys of the generations differ
    assert engine._call(check_invariants(engine.aio.store)) == []


def test_start_update_returns_once_accepted_and_its_handle_waits_for_the_result(
    make_engine: Any, serve: Any, label: str
) -> None:
    engine = make_engine(account, record_deposit)
    run = engine.start(account, label)  # not served yet: accepted, not completed
    handle = engine.start_update(run.run_id, "deposit", 5, update_id="u-1")
    assert (handle.run_id, handle.update_id, handle.name) == (run.run_id, "u-1", "deposit")
    assert len(of_type(engine.history(run.run_id), "UpdateAccepted")) == 1
    assert of_type(engine.history(run.run_id), "UpdateCompleted") == []
    with pytest.raises(UpdateTimeout):
        handle.result(timeout=0.2)
    with pytest.raises(UpdateRejected):  # refused by its validator: nothing recorded
        engine.start_update(run.run_id, "deposit", -1)
    with engine.running():
        assert handle.result() == 5
        failing = engine.start_update(run.run_id, "withdraw", 100)  # more than the balance
        with pytest.raises(UpdateFailed, match="cannot withdraw 100"):
            failing.result()
        # The same through the HTTP client: a handle of its own that waits over HTTP.
        base = serve(engine)
        key = make_key(engine, "default", "svc", "starter")
        with wp.Client(base, key) as client:
            remote = client.start_update(run.run_id, "deposit", 2, update_id="u-2")
            assert remote.result(timeout=30) == 7
    assert executions(label) == 2
