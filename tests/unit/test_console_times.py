"""The console's times in words: relative to now, with the exact UTC time kept."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from waypost.server.console.filters import ago, relative, took

NOW = datetime(2026, 12, 8, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("offset", "words"),
    [
        (timedelta(seconds=10), "just now"),
        (timedelta(minutes=3), "3 min ago"),
        (timedelta(minutes=89), "89 min ago"),
        (timedelta(hours=5), "5 h ago"),
        (timedelta(hours=30), "30 h ago"),
        (timedelta(hours=40), "2 days ago"),
        (timedelta(days=12), "12 days ago"),
        (timedelta(days=-2), "in 2 days"),
        (timedelta(minutes=-20), "in 20 min"),
        (timedelta(days=400), "2025-11-03"),
    ],
)
def test_relative_words(offset: timedelta, words: str) -> None:
    assert relative(NOW - offset, NOW) == words


def test_ago_keeps_the_exact_time_in_a_time_element() -> None:
    html = str(ago(NOW - timedelta(minutes=3), NOW))
    assert html == (
        '<time datetime="2026-12-08T11:57:00Z" title="2026-12-08 11:57:00 UTC">3 min ago</time>'
    )
    assert str(ago(None)) == "—"
    assert str(ago(NOW.timestamp() - 7200, NOW)).endswith(">2 h ago</time>")


def test_took_is_the_time_between() -> None:
    assert took(NOW, NOW + timedelta(seconds=90)) == "90.0 s"
    assert took(NOW, None) == ""
