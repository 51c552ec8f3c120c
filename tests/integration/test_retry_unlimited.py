"""`Retry(max_attempts=None)` (both stores): a step is retried for as long as its errors
are retryable, and the policy is stored as no limit."""

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
