"""When schedules fire: cron in a zone through daylight-saving changes, intervals."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from waypost.errors import InvalidRequest
from waypost.model.schedules import Timing, fire_run_id, iso


def at(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def fires(cron: str, tz: str, start: str, end: str) -> list[str]:
    return [iso(t) for t in Timing.of(cron, tz, None).fires(at(start), at(end))]


def test_a_daily_fire_in_the_skipped_hour_runs_at_the_end_of_the_gap_once() -> None:
    # 02:30 Madrid does not exist on 29 March 2026: it fires at 03:00 CEST (01:00 UTC)
    assert fires("30 2 * * *", "Europe/Madrid", "2026-03-28T00:00", "2026-03-30T23:00") == [
        "2026-03-28T01:30:00Z",
        "2026-03-29T01:00:00Z",
        "2026-03-30T00:30:00Z",
    ]


def test_a_daily_fire_in_the_repeated_hour_runs_once_at_its_first_occurrence() -> None:
    assert fires("30 2 * * *", "Europe/Madrid", "2026-10-24T00:00", "2026-10-26T23:00") == [
        "2026-10-24T00:30:00Z",
        "2026-10-25T00:30:00Z",  # 02:30 CEST, not 02:30 CET an hour later
        "2026-10-26T01:30:00Z",
    ]


def test_half_hourly_fires_only_increase_through_both_changes() -> None:
    spring = fires("*/30 * * * *", "Europe/Madrid", "2026-03-29T00:00", "2026-03-29T02:00")
    assert spring == [
        "2026-03-29T00:00:00Z",
        "2026-03-29T00:30:00Z",
        "2026-03-29T01:00:00Z",  # 02:00 and 02:30 skipped, 03:00 CEST: one fire
        "2026-03-29T01:30:00Z",
        "2026-03-29T02:00:00Z",
    ]
    autumn = fires("*/30 * * * *", "Europe/Madrid", "2026-10-25T00:00", "2026-10-25T02:00")
    assert autumn == [
        "2026-10-25T00:00:00Z",
        "2026-10-25T00:30:00Z",
        "2026-10-25T02:00:00Z",  # nothing in the repeated hour's second pass
    ]


def test_weekdays_in_a_zone_and_intervals_from_the_epoch() -> None:
    week = fires("0 9 * * MON-FRI", "Europe/Madrid", "2026-06-01T00:00", "2026-06-07T23:59")
    assert week == [f"2026-06-0{d}T07:00:00Z" for d in range(1, 6)]
    hourly = Timing.of(None, None, 3600)
    assert hourly.next_after(at("2026-06-01T10:20")) == at("2026-06-01T11:00")
    assert fire_run_id("s", at("2026-06-01T11:00")) == "sched:s:2026-06-01T11:00:00Z"


def test_a_range_with_too_many_fires_is_refused() -> None:
    with pytest.raises(InvalidRequest, match="more than 1000"):
        Timing.of("* * * * *", "UTC", None).fires(0, 86400)


@pytest.mark.parametrize(
    ("cron", "tz", "every", "field"),
    [
        ("0 0 31 2 *", "UTC", None, "cron"),
        ("* * * * * *", "UTC", None, "cron"),
        ("0 9 * * \u202e", "UTC", None, "cron"),
        ("0 9 * * *", "Europe/Atlantis", None, "tz"),
        ("0 9 * * *", "", None, "tz"),
        ("0 9 * * *", "x" * 100, None, "tz"),
        (None, None, True, "every"),
        (None, None, float("nan"), "every"),
        (None, None, 10**400, "every"),
        (None, "Europe/Madrid", 60, "tz"),
    ],
    ids=lambda v: repr(v)[:20],
)
def test_bad_timings_name_their_field(cron: object, tz: object, every: object, field: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        Timing.of(cron, tz, every)
    assert refused.value.field == field
