"""Schedule-to-close decided on an attempt's failure (`engine.attempts.failure`), without a
database: no retry starts at or after the step's bound, and the step's error names it."""

from __future__ import annotations

from typing import Any

from waypost.engine.attempts import Attempt, failure
from waypost.model.retry import Retry

T0 = 1_700_000_000.0
BOOM = {"type": "ValueError", "message": "boom"}


def attempt(n: int, close_by: float | None, **retry: Any) -> Attempt:
    spec: dict[str, Any] = {
        "retry": Retry(initial_interval=10, backoff=1, jitter=0, **retry).to_json(),
        "timeout": 3600.0,
    }
    if close_by is not None:
        spec.update(schedule_to_close=close_by - T0, close_by=close_by)
    return Attempt("t", "r", "1", "charge", fence=1, attempt=n, spec=spec, deadline=T0 + 3600)


def test_a_retry_that_starts_before_the_bound_is_kept() -> None:
    outcome = failure(attempt(1, T0 + 30), BOOM, T0 + 5, retryable=True)
    assert outcome.retrying and outcome.retry_at == T0 + 15
    assert outcome.error == BOOM


def test_a_retry_that_would_start_at_or_after_the_bound_fails_the_step_naming_it() -> None:
    for now in (T0 + 20, T0 + 25, T0 + 31):
        outcome = failure(attempt(3, T0 + 30, max_attempts=None), BOOM, now, retryable=True)
        assert not outcome.retrying and outcome.retry_at is None
        error = outcome.error or {}
        assert error["type"] == "ScheduleToCloseTimeout"
        assert error["message"] == (
            "the step did not finish within its schedule_to_close of 30 seconds: attempt 3 "
            "failed (ValueError: boom) and no further attempt may start"
        )
        assert error["cause"] == BOOM
        assert error["details"] == {"schedule_to_close": 30.0, "attempts": 3}


def test_a_failure_that_is_not_retried_anyway_keeps_its_own_error() -> None:
    non_retryable = failure(attempt(1, T0 + 30), BOOM, T0 + 25, retryable=False)
    last = failure(attempt(3, T0 + 30, max_attempts=3), BOOM, T0 + 25, retryable=True)
    for outcome in (non_retryable, last):
        assert not outcome.retrying and outcome.error == BOOM


def test_a_step_without_the_bound_retries_as_its_policy_says() -> None:
    outcome = failure(attempt(40, None, max_attempts=None), BOOM, T0 + 10**6, retryable=True)
    assert outcome.retrying and outcome.error == BOOM


def test_an_attempt_s_deadline_is_no_later_than_the_bound() -> None:
    from waypost.store.base import ClaimedTask

    fields = {f: None for f in ClaimedTask.__dataclass_fields__}
    claimed = ClaimedTask(
        **{
            **fields,
            "tenant": "t",
            "run_id": "r",
            "kind": "activity",
            "step": "1",
            "queue": "charge",
            "fence": 1,
            "attempt": 2,
            "deadline": T0 + 3600,
            "spec": {"close_by": T0 + 30},
        }
    )
    assert Attempt.from_claim(claimed).deadline == T0 + 30
