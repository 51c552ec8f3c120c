"""`Retry(max_attempts=None)` and a call's own options (both stores): a step is retried
for as long as its errors are retryable, the policy stored as no limit; a call's options
override the activity's own."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest

import waypost as wp
from tests.helpers import of_type

pytestmark = pytest.mark.timeout(120)

tries: dict[str, int] = {}
lock = threading.Lock()


@wp.activity(retry=wp.Retry(max_attempts=None, initial_interval=timedelta(milliseconds=10)))
def flaky(ctx: wp.ActivityContext, fails: int) -> int:
    with lock:
        tries[ctx.run_id] = tries.get(ctx.run_id, 0) + 1
    if ctx.attempt <= fails:
        raise ConnectionError(f"attempt {ctx.attempt} failed")
    return ctx.attempt


@wp.workflow(name="unlimited-retries")
async def keeps_trying(ctx: wp.WorkflowContext, fails: int) -> int:
    return int(await ctx.run(flaky, fails))


def test_a_step_without_an_attempt_limit_is_retried_until_it_succeeds(make_engine: Any) -> None:
    engine = make_engine(keeps_trying, flaky)
    with engine.running():
        run = engine.start(keeps_trying, 7)
        assert run.result(timeout=60) == 8
    history = engine.history(run.run_id)
    failed = of_type(history, "ActivityFailed")
    assert len(failed) == 7 and all(e.data["retrying"] for e in failed)
    (scheduled,) = of_type(history, "ActivityScheduled")
    assert scheduled.data["retry"]["max_attempts"] is None
    assert tries[run.run_id] == 8


@wp.activity(retry=wp.Retry(max_attempts=1))
def gives_up_at_once(ctx: wp.ActivityContext, fails: int) -> int:
    if ctx.attempt <= fails:
        raise ConnectionError(f"attempt {ctx.attempt} failed")
    return ctx.attempt


@wp.workflow(name="options-per-call")
async def patient_call(ctx: wp.WorkflowContext, fails: int) -> int:
    patient = ctx.options(retry=wp.Retry(max_attempts=None, initial_interval=0.01), timeout=30)
    return int(await patient.run(gives_up_at_once, fails))


def test_a_calls_options_override_the_activitys_own(make_engine: Any) -> None:
    engine = make_engine(patient_call, gives_up_at_once)
    with engine.running():
        run = engine.start(patient_call, 3)
        assert run.result(timeout=60) == 4  # its decorator would have failed it at once
    (scheduled,) = of_type(engine.history(run.run_id), "ActivityScheduled")
    assert scheduled.data["timeout"] == 30.0
    assert scheduled.data["retry"]["max_attempts"] is None
