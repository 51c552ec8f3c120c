"""The observer seam: what landed commits count, and the Prometheus observer's series."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from waypost.engine.attempts import Outcome
from waypost.engine.observing import CommitWatch
from waypost.model.events import EventType as E, NewEvent
from waypost.model.observe import NO_OBSERVER, OBSERVER_CALLS, NoObserver, fan_out
from waypost.observability import Metrics
from waypost.store.base import ActivityTaskOp, CommitResult, Conflict, RunCommit
from waypost.store.effects import SettleActivity


class Recorder(NoObserver):
    """Records every observer call as (method name, *arguments)."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def __getattribute__(self, name: str) -> Any:
        if name in ("calls", "__class__", "__dict__") or name.startswith("__"):
            return object.__getattribute__(self, name)
        calls = object.__getattribute__(self, "calls")
        return lambda *args: calls.append((name, *args))


def commit(*events: NewEvent, activity: SettleActivity | None = None) -> RunCommit:
    effects = (activity,) if activity is not None else ()
    return RunCommit(tenant="t", run_id="r", events=events, now=1.0, effects=effects)


OK = CommitResult(None)


def ev(kind: E, **data: Any) -> NewEvent:
    return NewEvent(kind, data, 1.0)


def test_a_landed_commit_counts_its_events_under_the_runs_workflow() -> None:
    rec = Recorder()
    watch = CommitWatch(rec)
    watch.note("t", "r", "order")
    watch.landed(commit(ev(E.ACTIVITY_SCHEDULED, activity="charge"), ev(E.RUN_COMPLETED)), OK, 0.5)
    assert rec.calls == [
        ("committed", 0.5, 2),
        ("step_scheduled", "charge"),
        ("run_ended", "t", "order", "completed"),
    ]
    rec.calls.clear()
    watch.landed(commit(ev(E.RUN_FAILED)), OK, 0.1)  # the ended run was forgotten
    assert rec.calls[-1] == ("run_ended", "t", "", "failed")


def test_a_refused_commit_counts_nothing() -> None:
    rec = Recorder()
    CommitWatch(rec).landed(commit(ev(E.RUN_COMPLETED)), CommitResult(Conflict.SEQ), 0.1)
    assert rec.calls == []


def test_compensations_are_counted_from_a_cancelled_or_failed_runs_details() -> None:
    rec = Recorder()
    watch = CommitWatch(rec)
    watch.note("t", "r", "trip")
    details = {"compensated": ["car", "hotel"], "compensation_failed": [{"step": "flight"}]}
    watch.landed(commit(ev(E.RUN_CANCELLED, details=details)), OK, 0.1)
    assert ("compensated", "t", "trip", "ok", 2) in rec.calls
    assert ("compensated", "t", "trip", "failed", 1) in rec.calls
    rec.calls.clear()
    watch.note("t", "r", "trip")
    watch.landed(commit(ev(E.RUN_FAILED, error={"details": {"compensated": ["a"]}})), OK, 0.1)
    assert ("compensated", "t", "trip", "ok", 1) in rec.calls
    assert not any(c[0] == "compensated" and c[3] == "failed" for c in rec.calls)


def test_a_run_held_by_a_quota_is_a_suspension_and_a_refusal() -> None:
    rec = Recorder()
    watch = CommitWatch(rec)
    watch.note("t", "r", "loop")
    error = {"type": "QuotaExceeded", "quota": "max_events_per_run"}
    watch.landed(commit(ev(E.RUN_SUSPENDED, error=error)), OK, 0.1)
    assert ("run_suspended", "t", "loop") in rec.calls
    assert ("quota_refused", "t", "max_events_per_run") in rec.calls


def test_a_lapsed_attempt_settled_is_a_lease_expiration() -> None:
    rec = Recorder()
    lapsed = SettleActivity("s", 3, ActivityTaskOp.RETRY, None, None, lapsed=True)
    CommitWatch(rec).landed(commit(ev(E.ACTIVITY_FAILED), activity=lapsed), OK, 0.1)
    assert ("lease_expired", "activity") in rec.calls


def test_attempt_outcomes() -> None:
    rec = Recorder()
    watch = CommitWatch(rec)
    watch.attempt("a", Outcome(ok=True))
    watch.attempt("a", Outcome(ok=False, error={"type": "ValueError"}, retrying=True))
    watch.attempt("a", Outcome(ok=False, error={"type": "ActivityTimeout"}))
    watch.attempt("a", Outcome(ok=False, error={"type": "ActivityTimeout"}, lapses=1))
    assert rec.calls == [
        ("activity_attempt", "a", "completed", False),
        ("activity_attempt", "a", "failed", True),
        ("activity_attempt", "a", "timeout", False),
        ("activity_attempt", "a", "lost", False),
    ]


def test_without_an_observer_nothing_is_looked_at() -> None:
    watch = CommitWatch(NO_OBSERVER)
    assert watch.idle
    watch.note("t", "r", "w")
    watch.landed(commit(ev(E.RUN_COMPLETED)), OK, 0.1)


def test_fan_out_tells_each_observer() -> None:
    a, b = Recorder(), Recorder()
    assert fan_out() is NO_OBSERVER
    assert fan_out(a) is a
    fan_out(a, b).run_started("t", "w")
    assert a.calls == b.calls == [("run_started", "t", "w")]


def test_fan_out_tells_every_call_of_the_protocol() -> None:
    a, b = Recorder(), Recorder()
    both = fan_out(a, b)
    names = sorted(OBSERVER_CALLS)
    assert len(names) == 13 and "schedule_fired" in names
    for i, name in enumerate(names):
        getattr(both, name)("t", i)
        getattr(NO_OBSERVER, name)("t", i)  # counts nothing
    assert a.calls == b.calls == [(name, "t", i) for i, name in enumerate(names)]
    with pytest.raises(AttributeError):
        both.run_start  # type: ignore[attr-defined]  # noqa: B018


def test_the_prometheus_observer_counts_into_its_own_registry() -> None:
    registry = CollectorRegistry()
    m = Metrics(registry, process=False)
    m.run_started("t", "w")
    m.run_started("t", "w")
    m.run_ended("t", "w", "terminated")
    m.run_ended("t", "w", "no such outcome")  # ignored, not a new series
    m.activity_attempt("a", "timeout", True)
    m.compensated("t", "w", "ok", 3)
    m.timer_fired(-0.5)  # a clock step back is no negative lag
    m.approval_decided("t", "rejected", 42.0)

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    assert value("waypost_runs_started_total", tenant="t", workflow="w") == 2
    assert value("waypost_runs_terminated_total", tenant="t", workflow="w") == 1
    assert value("waypost_activity_attempts_total", activity="a", outcome="timeout") == 1
    assert value("waypost_activity_retries_total", activity="a") == 1
    assert value("waypost_activity_timeouts_total", activity="a") == 1
    assert value("waypost_compensations_total", tenant="t", workflow="w", outcome="ok") == 3
    assert value("waypost_timer_lag_seconds_sum") == 0
    assert value("waypost_approval_dwell_seconds_sum") == 42
    assert value("waypost_approvals_decided_total", tenant="t", outcome="rejected") == 1
    assert Metrics(CollectorRegistry()).registry is not registry  # no shared global
