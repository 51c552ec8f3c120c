"""Retry policy: exponential backoff, a cap, jitter, validation and its stored form."""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given, strategies as st

import waypost as wp
from waypost.model.retry import Retry


def test_defaults() -> None:
    r = Retry()
    assert r.max_attempts == 3
    assert r.initial_interval == timedelta(seconds=1)
    assert r.backoff == 2.0
    assert r.max_interval == timedelta(minutes=5)
    assert r.jitter == 0.2
    assert r.non_retryable == ()


def test_delays_grow_by_the_backoff_factor() -> None:
    r = Retry(max_attempts=10, initial_interval=timedelta(seconds=0.5), backoff=3.0, jitter=0)
    assert [r.delay(n, 0.0) for n in range(1, 6)] == [0.5, 1.5, 4.5, 13.5, 40.5]


def test_a_backoff_of_one_keeps_the_interval_constant() -> None:
    r = Retry(max_attempts=10, initial_interval=timedelta(seconds=2), backoff=1.0, jitter=0)
    assert {r.delay(n, 0.0) for n in range(1, 10)} == {2.0}


def test_delays_are_capped_at_max_interval() -> None:
    r = Retry(
        max_attempts=100,
        initial_interval=timedelta(seconds=1),
        backoff=2.0,
        max_interval=timedelta(seconds=10),
        jitter=0,
    )
    assert [r.delay(n, 0.0) for n in range(1, 8)] == [1, 2, 4, 8, 10, 10, 10]


def test_the_cap_holds_for_very_late_attempts() -> None:
    # A long-lived retry policy (many attempts) must keep waiting max_interval,
    # not fail to compute the delay once backoff**n leaves the float range.
    r = Retry(max_attempts=10_000, max_interval=timedelta(minutes=5), jitter=0)
    assert r.delay(1_100, 0.0) == 300.0
    assert r.delay(9_999, 0.0) == 300.0


def test_the_first_attempt_and_nonsense_attempt_numbers_wait_the_initial_interval() -> None:
    r = Retry(initial_interval=timedelta(seconds=3), jitter=0)
    assert r.delay(1, 0.0) == 3.0
    assert r.delay(0, 0.0) == 3.0


def test_jitter_takes_off_at_most_its_share() -> None:
    r = Retry(initial_interval=timedelta(seconds=10), jitter=0.2)
    assert r.delay(1, 0.0) == 10.0
    assert r.delay(1, 0.5) == pytest.approx(9.0)
    assert r.delay(1, 0.999999) == pytest.approx(8.0, abs=1e-4)
    assert r.delay(1, 0.999999) > 8.0


def test_no_jitter_gives_exact_delays_whatever_the_random_number() -> None:
    r = Retry(initial_interval=timedelta(seconds=4), jitter=0)
    assert {r.delay(2, x) for x in (0.0, 0.3, 0.99)} == {8.0}


@given(
    attempt=st.integers(min_value=1, max_value=60),
    rand=st.floats(min_value=0.0, max_value=1.0, exclude_max=True),
    initial=st.floats(min_value=0.0, max_value=100.0),
    backoff=st.floats(min_value=1.0, max_value=5.0),
    cap=st.floats(min_value=0.0, max_value=3600.0),
    jitter=st.floats(min_value=0.0, max_value=1.0),
)
def test_delay_is_within_the_jitter_band_below_the_capped_backoff(
    attempt: int, rand: float, initial: float, backoff: float, cap: float, jitter: float
) -> None:
    r = Retry(
        max_attempts=100,
        initial_interval=timedelta(seconds=initial),
        backoff=backoff,
        max_interval=timedelta(seconds=cap),
        jitter=jitter,
    )
    base = min(
        r.initial_interval.total_seconds() * backoff ** (attempt - 1),
        r.max_interval.total_seconds(),
    )
    d = r.delay(attempt, rand)
    assert d <= base * (1 + 1e-12)
    assert d >= base * (1 - jitter) * (1 - 1e-12)
    assert d >= 0
    # Later attempts never wait less (for the same random draw).
    assert r.delay(attempt + 1, rand) >= d * (1 - 1e-12)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_attempts": 0}, "max_attempts must be at least 1, got 0"),
        ({"max_attempts": -3}, "max_attempts must be at least 1, got -3"),
        ({"max_attempts": math.inf}, "must be a whole number, or None for no limit, got inf"),
        ({"max_attempts": 2.5}, "must be a whole number, or None for no limit, got 2.5"),
        ({"max_attempts": True}, "must be a whole number, or None for no limit, got True"),
        ({"max_attempts": "3"}, "must be a whole number, or None for no limit, got '3'"),
        ({"initial_interval": math.inf}, "initial_interval must be a finite number of seconds"),
        ({"max_interval": 1e300}, "max_interval must be a finite number of seconds"),
        ({"initial_interval": "1s"}, "initial_interval must be a timedelta or a number of"),
        ({"initial_interval": -1}, "intervals must not be negative"),
        ({"backoff": "2"}, "backoff must be a number, got '2'"),
        ({"jitter": None}, "jitter must be a number, got None"),
        ({"backoff": 0.5}, "backoff must be at least 1.0, got 0.5"),
        ({"backoff": math.nan}, "backoff must be at least 1.0, got nan"),
        ({"jitter": -0.1}, "jitter must be between 0 and 1, got -0.1"),
        ({"jitter": 1.5}, "jitter must be between 0 and 1, got 1.5"),
        ({"initial_interval": timedelta(seconds=-1)}, "intervals must not be negative"),
        ({"max_interval": timedelta(seconds=-1)}, "intervals must not be negative"),
    ],
)
def test_invalid_policies_are_refused(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Retry(**kwargs)


def test_boundary_values_are_accepted() -> None:
    r = Retry(max_attempts=1, backoff=1.0, jitter=0.0, initial_interval=timedelta(0))
    assert r.delay(1, 0.5) == 0.0
    assert Retry(jitter=1.0).delay(1, 0.5) == pytest.approx(0.5)


def test_intervals_may_be_given_in_seconds() -> None:
    r = Retry(initial_interval=0.5, max_interval=60)
    assert r == Retry(initial_interval=timedelta(seconds=0.5), max_interval=timedelta(minutes=1))
    assert r.delay(1, 0.0) == 0.5


def test_no_limit_retries_for_as_long_as_errors_are_retryable() -> None:
    r = Retry(max_attempts=None)
    assert r.allows(1) and r.allows(10**9)
    assert Retry.from_json(r.to_json()) == r
    assert r.to_json()["max_attempts"] is None
    assert Retry(max_attempts=3).allows(2) and not Retry(max_attempts=3).allows(3)


class Boom(Exception):
    pass


class BigBoom(Boom):
    pass


def test_non_retryable_by_type_or_name_and_by_base_class() -> None:
    r = Retry(non_retryable=(Boom, "KeyError"))
    assert r.non_retryable_names() == ["Boom", "KeyError"]
    assert r.is_non_retryable("Boom")
    assert r.is_non_retryable("KeyError")
    assert not r.is_non_retryable("ValueError")
    assert r.is_non_retryable("BigBoom", ("BigBoom", "Boom", "Exception"))
    assert not r.is_non_retryable("BigBoom", ("BigBoom", "Exception"))


def test_stored_form_round_trips() -> None:
    r = Retry(
        max_attempts=7,
        initial_interval=timedelta(milliseconds=250),
        backoff=1.5,
        max_interval=timedelta(seconds=90),
        non_retryable=(Boom, "KeyError"),
        jitter=0.1,
    )
    data = r.to_json()
    assert data == {
        "max_attempts": 7,
        "initial_interval": 0.25,
        "backoff": 1.5,
        "max_interval": 90.0,
        "non_retryable": ["Boom", "KeyError"],
        "jitter": 0.1,
    }
    back = Retry.from_json(data)
    assert back.to_json() == data
    assert back.is_non_retryable("Boom")
    assert [back.delay(n, 0.3) for n in range(1, 6)] == [r.delay(n, 0.3) for n in range(1, 6)]


def test_stored_form_without_jitter_takes_the_default() -> None:
    data = Retry().to_json()
    del data["jitter"]
    del data["non_retryable"]
    back = Retry.from_json(data)
    assert back.jitter == 0.2
    assert back.non_retryable == ()


def test_retry_is_exported_and_frozen() -> None:
    assert wp.Retry is Retry
    r = Retry()
    with pytest.raises(AttributeError):
        r.max_attempts = 5  # type: ignore[misc]
