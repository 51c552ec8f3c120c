"""Log lines that callers cannot forge: escaping values and records (pure)."""

from __future__ import annotations

import contextvars
import json
import logging
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import given, strategies as st

from waypost.model.identity import printable
from waypost.model.logs import (
    RUN_FIELDS,
    EscapeArguments,
    JsonLogFormatter,
    configure_logging,
    log_context,
    logger,
    run_fields,
)


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


def _record(message: str, **extra: object) -> logging.LogRecord:
    record = logging.LogRecord("waypost.test", logging.INFO, __file__, 1, message, None, None)
    record.__dict__.update(extra)
    return record


def test_json_lines_name_the_run_being_worked_on() -> None:
    formatter = JsonLogFormatter()
    outside = json.loads(formatter.format(_record("idle")))
    assert set(outside) == {"time", "level", "logger", "message"}
    with log_context(run_id="r-1", step="2", attempt=3, tenant="acme"):
        inside = json.loads(formatter.format(_record("working")))
        # A record's own fields say more than the context: a next step claimed meanwhile.
        claimed = json.loads(formatter.format(_record("claimed", step="3", attempt=1)))
        with log_context(run_id="r-2", tenant="acme", step=None, attempt=None):
            nested = json.loads(formatter.format(_record("task")))
        after = json.loads(formatter.format(_record("again")))
    assert {k: inside[k] for k in RUN_FIELDS} == {
        "run_id": "r-1",
        "step": "2",
        "attempt": 3,
        "tenant": "acme",
    }
    assert (claimed["step"], claimed["attempt"], claimed["run_id"]) == ("3", 1, "r-1")
    assert (nested["run_id"], nested["step"], nested["attempt"]) == ("r-2", None, None)
    assert after["run_id"] == "r-1"
    assert run_fields() is None


def test_a_json_line_is_one_line_whatever_the_message() -> None:
    line = JsonLogFormatter().format(_record("a\nb\u2028c \x1b[31m"))
    assert "\n" not in line and line.isascii()
    assert json.loads(line)["message"] == "a\nb\u2028c \x1b[31m"


def test_the_run_context_reaches_a_thread_given_the_context() -> None:
    with log_context(run_id="r-9", tenant="t"), ThreadPoolExecutor(1) as pool:
        seen = pool.submit(contextvars.copy_context().run, run_fields).result()
        bare = pool.submit(run_fields).result()
    assert seen == {"run_id": "r-9", "tenant": "t"} and bare is None


def test_an_unknown_log_format_is_refused() -> None:
    with pytest.raises(ValueError, match="yaml"):
        configure_logging("yaml")


def test_json_lines_carry_the_fields_more_gives() -> None:
    ids = {"trace_id": "4bf92f3577b34da6a3ce929d0e0e4736", "span_id": "00f067aa0ba902b7"}
    traced = json.loads(JsonLogFormatter(lambda: ids).format(_record("x")))
    untraced = json.loads(JsonLogFormatter(lambda: None).format(_record("x")))
    assert {k: traced[k] for k in ids} == ids
    assert "trace_id" not in untraced
