"""Log lines that callers cannot forge: escaping values and records (pure)."""

from __future__ import annotations

import logging

import pytest
from hypothesis import given, strategies as st

from waypost.model.identity import printable
from waypost.model.logs import EscapeArguments, logger


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("plain text, ü and 日本", "plain text, ü and 日本"),
        ("a\nb", "a\\nb"),
        ("a\r\nWARNING forged", "a\\r\\nWARNING forged"),
        ("a\u2028b\u2029c\u0085d", "a\\u2028b\\u2029c\\x85d"),
        ("\x1b[31mred", "\\x1b[31mred"),
        ("tab\there", "tab\\there"),
        ("back\\slash", "back\\\\slash"),
        ("\u202eevil", "\\u202eevil"),
        ("\U000e0041tag", "\\U000e0041tag"),
    ],
)
def test_printable_escapes_what_would_break_a_log_line(value: str, shown: str) -> None:
    assert printable(value) == shown
    assert printable(value).isprintable()


@given(st.text())
def test_printable_is_always_one_printable_line(value: str) -> None:
    assert printable(value, limit=10_000).isprintable()


def test_long_values_are_cut_in_log_lines() -> None:
    out = printable("x" * 5000, limit=100)
    assert len(out) < 140 and out.startswith("x" * 100) and "5000" in out


def test_log_records_have_their_arguments_escaped() -> None:
    record = logging.LogRecord(
        "waypost.test", logging.WARNING, __file__, 1, "%s did %d things in %.1fs: %r", None, None
    )
    record.args = ("eve\nFORGED", 3, 1.25, "x\x00")
    assert EscapeArguments().filter(record)
    assert record.getMessage() == "eve\\nFORGED did 3 things in 1.2s: 'x\\\\x00'"
    mapping = logging.LogRecord(
        "waypost.test", logging.INFO, __file__, 1, "%(who)s", ({"who": "a\u2028b"},), None
    )
    assert EscapeArguments().filter(mapping)
    assert mapping.getMessage() == "a\\u2028b"


def test_waypost_loggers_escape_what_they_are_given(caplog: pytest.LogCaptureFixture) -> None:
    log = logger("waypost.test-logs")
    assert logger("waypost.test-logs") is log and len(log.filters) == 1  # added once
    with caplog.at_level(logging.INFO, logger="waypost.test-logs"):
        log.info("hello %s", "eve\n2024-01-01 ERROR forged")
    assert caplog.records[-1].getMessage() == "hello eve\\n2024-01-01 ERROR forged"
