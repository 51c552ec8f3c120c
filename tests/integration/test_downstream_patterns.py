"""What to do when a downstream system cannot deduplicate by idempotency key.

An activity runs at least once. When its first attempt's effect happened but its
answer was lost, a blind retry would repeat the effect. These tests check that the
engine gives a retry what it needs to avoid that: the same idempotency key on every
attempt (so the retry can look the effect up first), the attempt number (so a retry
knows it is one), and a way to stop retrying and hand the step to a person.
"""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import waypost as wp
from tests.helpers import eventually, of_type


class Bank:
    """A downstream that does not deduplicate: every call is a new transfer.

    It can be queried by the reference a transfer was made with.
    """

    def __init__(self) -> None:
        self.transfers: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def transfer(self, reference: str, cents: int) -> dict[str, Any]:
        with self.lock:
            done = {"id": f"tr{len(self.transfers) + 1}", "reference": reference, "cents": cents}
            self.transfers.append(done)
            return done

    def find(self, reference: str) -> dict[str, Any] | None:
        with self.lock:
            return next((t for t in self.transfers if t["reference"] == reference), None)


bank = Bank()
attempts: list[tuple[str, int]] = []


class AnswerLost(Exception):
    """The downstream acted, but its answer never came back."""


@wp.activity(retry=wp.Retry(max_attempts=5, initial_interval=timedelta(milliseconds=10)))
def pay_query_first(ctx: wp.ActivityContext, cents: int) -> dict[str, Any]:
    attempts.append((ctx.idempotency_key, ctx.attempt))
    if ctx.attempt > 1:
        found = bank.find(ctx.idempotency_key)  # query first: did an earlier attempt act?
        if found is not None:
            return found
    done = bank.transfer(ctx.idempotency_key, cents)
    if ctx.attempt == 1:
        raise AnswerLost("connection reset after the request was sent")
    return done


@wp.workflow(name="pay_query_first")
async def pay_query_first_wf(ctx: wp.WorkflowContext, cents: int) -> dict[str, Any]:
    return await ctx.run(pay_query_first, cents)


def test_a_retry_queries_the_downstream_by_the_key_and_does_not_repeat_the_effect(
    make_engine: Any,
) -> None:
    bank.transfers.clear()
    attempts.clear()
    engine = make_engine(pay_query_first_wf, pay_query_first)
    with engine.running():
        run = engine.start(pay_query_first_wf, 1299)
        result = run.result(timeout=20)
    assert len(bank.transfers) == 1, bank.transfers
    assert result == bank.transfers[0]
    # Both attempts carried one key, the one the transfer was made with.
    assert [n for _, n in attempts] == [1, 2]
    assert {key for key, _ in attempts} == {bank.transfers[0]["reference"]}
    failed = of_type(engine.history(run.run_id), "ActivityFailed")
    assert [(e.data["attempt"], e.data["retrying"]) for e in failed] == [(1, True)]


class OutcomeUnknown(wp.NonRetryableError):
    """An earlier attempt may have acted, and the downstream cannot be asked."""


blind: list[int] = []


@wp.activity(retry=wp.Retry(max_attempts=5, initial_interval=timedelta(milliseconds=10)))
def pay_blind_downstream(ctx: wp.ActivityContext, cents: int) -> str:
    if ctx.attempt > 1:
        raise OutcomeUnknown(f"attempt {ctx.attempt - 1} may have paid; nobody can tell")
    blind.append(cents)
    raise AnswerLost("timed out waiting for the answer")


@wp.workflow(name="pay_or_ask")
async def pay_or_ask(ctx: wp.WorkflowContext, cents: int) -> dict[str, Any]:
    try:
        return {"paid": await ctx.run(pay_blind_downstream, cents)}
    except wp.ActivityError as err:
        # Hand the step to a person: they check the downstream and say what happened.
        answer = await ctx.wait_signal("resolved", timeout=timedelta(days=3))
        return {"error": err.type, "resolved": answer}


def test_a_step_whose_outcome_is_unknown_is_handed_to_a_person_not_retried(
    make_engine: Any,
) -> None:
    blind.clear()
    engine = make_engine(pay_or_ask, pay_blind_downstream)
    with engine.running():
        run = engine.start(pay_or_ask, 500)
        eventually(
            lambda: {"kind": "signal", "name": "resolved"} in engine.get(run.run_id).waiting_for,
            "the run waits for a person",
        )
        assert blind == [500]  # the effect was attempted once, never again
        engine.signal(run.run_id, "resolved", {"paid": True, "by": "olga"})
        result = run.result(timeout=20)
    assert result == {"error": "OutcomeUnknown", "resolved": {"paid": True, "by": "olga"}}
    assert blind == [500]
    failed = of_type(engine.history(run.run_id), "ActivityFailed")
    assert [(e.data["attempt"], e.data["retrying"]) for e in failed] == [(1, True), (2, False)]
