"""What happens next to a run, from its snapshot, tasks and approvals alone (no I/O)."""

from __future__ import annotations

from typing import Any

from tests.helpers.records import NOW, activity, iso, run, task
from waypost.features.next_action import next_action
from waypost.store.base import ApprovalRecord, RunOutlook


def timer(
    step: str, at: float, purpose: str | None = None, site: str = "app.py:12"
) -> dict[str, Any]:
    entry: dict[str, Any] = {"kind": "timer", "step": step, "until": iso(at), "site": site}
    if purpose is not None:
        entry["purpose"] = purpose
    return entry


def test_an_ended_run_has_no_next_action() -> None:
    for status in ("completed", "failed", "cancelled", "terminated"):
        assert next_action(run(status), [], None, NOW) is None


def test_a_suspended_run_names_the_reason_bounded() -> None:
    error = {"type": "NondeterminismError", "message": "event 2 differs\n" + "x" * 5000}
    waiting = [{"kind": "operator", "detail": "the workflow code no longer matches"}]
    action = next_action(run("suspended", error=error), waiting, None, NOW)
    assert action is not None and action["kind"] == "suspended"
    assert action["detail"].startswith("suspended until an operator acts: event 2 differs x")
    assert len(action["detail"]) < 400 and "\n" not in action["detail"]
    # No error recorded: the operator entry of waiting_for says why.
    action = next_action(run("suspended"), waiting, None, NOW)
    assert action is not None and "no longer matches (fix the code" in action["detail"]


def test_a_run_suspended_by_a_bug_says_where_and_what_to_do() -> None:
    error = {"type": "KeyError", "message": "'tax_rate'", "bug": True, "site": "shop.py:17"}
    action = next_action(run("suspended", error=error), [], None, NOW)
    assert action is not None and action["detail"] == (
        "suspended until an operator acts: KeyError at shop.py:17: 'tax_rate' "
        "(fix the code, then `resume`; or `terminate`)"
    )


def test_a_paused_run_waits_for_an_operator() -> None:
    action = next_action(run("paused"), [activity()], RunOutlook([task()]), NOW)
    assert action == {
        "kind": "paused",
        "detail": "paused: nothing runs until an operator resumes the run",
        "at": None,
    }


def test_code_no_worker_serves_comes_before_anything_it_waits_for() -> None:
    waiting = [
        activity(),
        {"kind": "code", "detail": "workflow 'order' version '1' is not registered by any"},
    ]
    action = next_action(run(), waiting, RunOutlook([task(state="leased", attempt=1)]), NOW)
    assert action is not None and action["kind"] == "no_worker"
    assert action["detail"].startswith("workflow 'order' version '1'")


def test_the_workflow_code_about_to_run() -> None:
    ready = RunOutlook([task("workflow", state="ready", visible_at=NOW - 1)])
    action = next_action(run("running"), [], ready, NOW)
    assert action is not None and action["kind"] == "workflow"
    assert "runs next" in action["detail"] and action["at"] == iso(NOW - 1)
    later = RunOutlook([task("workflow", state="ready", visible_at=NOW + 90)])
    action = next_action(run("running"), [], later, NOW)
    assert action is not None and action["at"] == iso(NOW + 90)
    assert "runs again at" in action["detail"]
    lapsed = RunOutlook([task("workflow", state="leased", visible_at=NOW - 5, owner="dead")])
    action = next_action(run("running"), [], lapsed, NOW)
    assert action is not None and "stopped answering" in action["detail"]


def test_a_running_attempt_comes_before_timers_and_waits() -> None:
    waiting = [
        timer("3", NOW + 10),
        {"kind": "signal", "name": "go"},
        activity("1"),
        activity("2", "ship"),
    ]
    outlook = RunOutlook(
        [
            task(step="1", state="ready", visible_at=NOW + 5, attempt=1),
            task(step="2", state="leased", attempt=2, deadline=NOW + 300, owner="e1"),
        ]
    )
    action = next_action(run("running"), waiting, outlook, NOW)
    assert action is not None
    assert action["kind"] == "activity" and action["activity"] == "ship"
    assert action["detail"].startswith("activity 'ship' (step 2) attempt 2 is running")
    assert action["deadline"] == iso(NOW + 300) and action["at"] is None
    assert action["others"] == 3


def test_the_earliest_timed_thing_comes_before_waits_with_no_time() -> None:
    waiting = [
        {"kind": "signal", "name": "go"},
        timer("4", NOW + 600),
        activity("1"),
    ]
    outlook = RunOutlook([task(step="1", state="ready", visible_at=NOW + 30, attempt=2)])
    action = next_action(run(), waiting, outlook, NOW)
    assert action is not None and action["kind"] == "retry"
    assert action["at"] == iso(NOW + 30) and action["attempt"] == 3
    assert "attempt 2 failed; attempt 3 is due at" in action["detail"]


def test_an_activity_no_worker_serves_says_so() -> None:
    waiting = [
        activity("1", "ship"),
        {"kind": "code", "activity": "ship", "detail": "no running worker serves activity 'ship'"},
    ]
    due = RunOutlook([task(step="1", state="ready", visible_at=NOW - 1)])
    action = next_action(run("running"), waiting, due, NOW)
    assert action is not None and action["kind"] == "no_worker"
    assert action["detail"] == (
        "activity 'ship' (step 1) is due, but no running worker serves activity 'ship'"
    )
    retry = RunOutlook([task(step="1", state="ready", visible_at=NOW + 60, attempt=1)])
    action = next_action(run("running"), waiting, retry, NOW)
    assert action is not None and action["kind"] == "retry"
    assert action["detail"].endswith("but no running worker serves activity 'ship'")


def test_waits_are_told_with_the_timers_that_bound_them() -> None:
    waiting = [
        {"kind": "signal", "name": "shipped"},
        timer("2", NOW + 3600, purpose="wait_signal(shipped) timeout"),
    ]
    action = next_action(run(), waiting, RunOutlook(), NOW)
    assert action is not None and action["kind"] == "signal"
    assert action["at"] == iso(NOW + 3600)
    assert "until 2027-01-15 09:00:00 UTC (then the wait times out)" in action["detail"]
    assert "others" not in action  # the timer is part of the wait, not another thing

    condition = [
        {"kind": "condition", "site": "app.py:40"},
        timer("5", NOW + 30, purpose="wait_condition timeout"),
    ]
    action = next_action(run(), condition, RunOutlook(), NOW)
    assert action is not None and action["kind"] == "condition" and action["at"] == iso(NOW + 30)


def test_an_approval_names_who_may_decide_and_until_when() -> None:
    users = [f"user{i}" for i in range(8)]
    record = ApprovalRecord(
        tenant="acme",
        approval_id="ap1",
        run_id="r1",
        step="1",
        timer_step="2",
        name="manager",
        policy={"kind": "quorum", "users": users, "groups": ["finance"], "count": 2},
        status="pending",
        started_by=None,
        data=None,
        expires_at=NOW + 86400,
        created_at=NOW - 60,
        closed_at=None,
    )
    waiting = [
        {"kind": "approval", "step": "1", "name": "manager", "approval_id": "ap1"},
        timer("2", NOW + 86400, purpose="approval(manager) expiry"),
        timer("3", NOW + 7200, purpose="escalation to directors"),
    ]
    action = next_action(run(), waiting, RunOutlook([], [record]), NOW)
    assert action is not None
    # The escalation is due first; the approval is the other thing.
    assert action["kind"] == "timer" and "escalation to directors" in action["detail"]
    assert action["others"] == 1
    without_escalation = waiting[:2]
    action = next_action(run(), without_escalation, RunOutlook([], [record]), NOW)
    assert action is not None and action["kind"] == "approval"
    assert action["detail"] == (
        "waiting for approval 'manager' (step 1) by 2 of [user0, user1, user2, user3, "
        "user4, and 4 more], until 2027-01-16 08:00:00 UTC (then it expires)"
    )
    assert action["at"] == iso(NOW + 86400) and action["approval_id"] == "ap1"
    # Without its row (read a moment after it closed), the wait is still named.
    action = next_action(run(), without_escalation, RunOutlook(), NOW)
    assert action is not None and action["detail"].startswith("waiting for approval 'manager'")


def test_a_definitions_time_limit_and_plain_timers() -> None:
    waiting = [timer("7", NOW + 50, site="purchase_order v2 timeout")]
    action = next_action(run(), waiting, RunOutlook(), NOW)
    assert action is not None and action["kind"] == "timer"
    assert action["detail"].startswith("the run's time limit (purchase_order v2 timeout) ends at")
    waiting = [timer("3", NOW + 50, site="purchase_order v2 step cool_off")]
    action = next_action(run(), waiting, RunOutlook(), NOW)
    assert action is not None
    assert action["detail"].startswith("timer of step 3 (purchase_order v2 step cool_off) fires")
