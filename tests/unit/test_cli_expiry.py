"""`keys create --expires`: durations and times, and a clear error for what is neither."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import click
import pytest

from waypost.cli.access import parse_expiry

NOW = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "after"),
    [("90m", timedelta(minutes=90)), ("12h", timedelta(hours=12)), ("2w", timedelta(weeks=2))],
)
def test_a_duration_counts_from_now(text: str, after: timedelta) -> None:
    assert parse_expiry(text, NOW) == NOW + after


def test_a_time_with_a_zone_is_taken_as_it_is() -> None:
    assert parse_expiry("2030-01-31T12:00:00Z", NOW) == datetime(2030, 1, 31, 12, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("999999w", "past the year 9999"),
        ("soon", "give a duration"),
        ("2030-01-31T12:00:00", "needs a time zone"),
        ("9999999w", "give a duration"),
    ],
)
def test_what_is_neither_is_a_clear_error_on_the_option(text: str, says: str) -> None:
    with pytest.raises(click.BadParameter, match=says) as caught:
        parse_expiry(text, NOW)
    assert caught.value.param_hint == "--expires"
