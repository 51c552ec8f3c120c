"""The W3C `traceparent` a caller sends: what is kept with a run and what is ignored."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, strategies as st

from waypost.engine import tracing

GOOD = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.mark.parametrize(
    "value",
    [
        GOOD,
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",  # not sampled
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03",  # sampled, random id
    ],
)
def test_a_valid_traceparent_is_kept_as_it_came(value: str) -> None:
    assert tracing.parse_traceparent(value) == value


@pytest.mark.parametrize(
    "value",
    [
        None,
        b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        55,
        "",
        GOOD + "\n",
        GOOD[:-1] + "\n",
        " " + GOOD[1:],
        GOOD.upper(),
        "01" + GOOD[2:],  # a version this reader does not know
        "00-" + "0" * 32 + "-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-" + "0" * 16 + "-01",
        GOOD.replace("-", "_"),
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",
        pytest.param("\u0660" * 55, id="arabic-indic-digits"),
        pytest.param("x" * 100_000, id="huge"),
    ],
)
def test_anything_else_is_ignored(value: Any) -> None:
    assert tracing.parse_traceparent(value) is None


@given(st.text(max_size=80))
def test_what_is_kept_is_always_a_version_00_traceparent(value: str) -> None:
    kept = tracing.parse_traceparent(value)
    assert kept is None or (len(kept) == 55 and kept.isascii() and kept.startswith("00-"))


def test_a_caller_context_is_ignored_when_invalid_and_restored_after() -> None:
    with tracing.caller_context("nonsense"), tracing.start_span() as kept:
        assert kept is None
    with tracing.caller_context(GOOD), tracing.start_span() as kept:
        assert kept == GOOD  # no tracer provider here: the caller's, as it came
    with tracing.start_span() as kept:
        assert kept is None
