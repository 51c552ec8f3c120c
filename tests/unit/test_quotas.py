"""Quotas as a record: defaults, a tenant's overrides, what callers may set; and how
`next_action` tells a run that waits for a quota (no I/O)."""

from __future__ import annotations

from typing import Any

import pytest

import waypost as wp
from tests.helpers.records import NOW, activity, run, task
from waypost.features.next_action import next_action
from waypost.model.quotas import apply_overrides, check_overrides
from waypost.store.base import RunOutlook


def test_defaults_are_unlimited_where_a_count_would_cost_and_finite_elsewhere() -> None:
    q = wp.Quotas()
    assert q.max_concurrent_runs is None and q.starts_per_second is None
    assert q.max_concurrent_activities is None and q.max_pending_timers is None
    assert q.max_events_per_run == 50_000 and q.max_definitions == 10_000
    assert q.max_payload_bytes is None  # as the tenant's Limits say
    assert q.start_burst == 100


def test_overrides_apply_by_name_and_damaged_ones_limit_nothing_new() -> None:
    base = wp.Quotas(max_concurrent_runs=100)
    assert base.effective({}) is base
    merged = base.effective(
        {
            "max_concurrent_runs": 5,
            "max_events_per_run": None,  # unlimited
            "starts_per_second": "fast",  # damaged: ignored
            "start_burst": None,  # cannot be unlimited: ignored
            "max_runs": 3,  # not a quota: ignored
        }
    )
    assert merged.max_concurrent_runs == 5 and merged.max_events_per_run is None
    assert merged.starts_per_second is None and merged.start_burst == 100


@pytest.mark.parametrize(
    "bad",
    [
        {"max_concurrent_runs": -1},
        {"starts_per_second": 0},
        {"starts_per_second": float("nan")},
        {"starts_per_second": 10**400},
        {"start_burst": 0},
        {"max_events_per_run": 0},
        {"max_payload_bytes": 0},
        {"max_definitions": 2**53},
        {"max_pending_timers": True},
        {"max_concurrent_activities": "3"},
    ],
)
def test_a_bad_value_is_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(wp.InvalidRequest):
        check_overrides(bad)
    with pytest.raises(ValueError, match="Quotas"):
        wp.Quotas(**bad)


def test_changes_set_a_number_unlimited_or_the_default_again() -> None:
    changes = check_overrides(
        {"max_concurrent_runs": 5, "max_pending_timers": "unlimited", "max_definitions": "default"}
    )
    assert changes == {
        "max_concurrent_runs": 5,
        "max_pending_timers": None,
        "max_definitions": "default",
    }
    stored = apply_overrides({"max_definitions": 3, "start_burst": 7}, changes)
    assert stored == {"start_burst": 7, "max_concurrent_runs": 5, "max_pending_timers": None}


def test_next_action_says_when_a_due_activity_waits_for_the_tenants_quota() -> None:
    quota = {"kind": "quota", "quota": "max_concurrent_activities", "detail": "tenant 'acme' ..."}
    outlook = RunOutlook([task("workflow"), task(visible_at=NOW - 1)])
    action = next_action(run(), [activity(), quota], outlook, NOW)
    assert action is not None and action["kind"] == "quota"
    assert action["quota"] == "max_concurrent_activities" and "is due, but" in action["detail"]
    running = RunOutlook([task("workflow"), task(state="leased", attempt=1)])
    assert next_action(run(), [activity(), quota], running, NOW)["kind"] == "activity"  # type: ignore[index]


def test_next_action_says_when_a_decision_waits_for_the_timer_quota() -> None:
    quota = {"kind": "quota", "quota": "max_pending_timers", "detail": "the run's next step ..."}
    outlook = RunOutlook([task("workflow", state="ready", visible_at=NOW + 1)])
    action = next_action(run(), [quota], outlook, NOW)
    assert action is not None and action["kind"] == "quota"
    assert action["quota"] == "max_pending_timers" and action["at"] is not None
