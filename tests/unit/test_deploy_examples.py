"""The Grafana dashboard and the Prometheus alert rules in deploy/ parse, and refer only to
series (and labels) that waypost exposes."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import CollectorRegistry

from waypost.observability import Metrics, StoreGauges
from waypost.store.base import QueueGauge, RunCount
from waypost.store.schedules import ScheduleCount

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
SERIES = re.compile(r"\bwaypost_[a-z_]+")
SELECTOR = re.compile(r"\b(waypost_[a-z_]+)\{([^}]*)\}")
BY = re.compile(r"\bby \(([^)]*)\)")


def exposed() -> dict[str, set[str]]:
    """Every waypost sample name a scrape can hold, with its labels."""
    registry = CollectorRegistry()
    m = Metrics(registry, process=False)
    m.run_started("t", "w")
    for outcome in ("completed", "failed", "cancelled", "terminated"):
        m.run_ended("t", "w", outcome)
    m.run_suspended("t", "w")
    m.compensated("t", "w", "ok", 1)
    m.step_scheduled("a")
    m.activity_attempt("a", "timeout", True)
    m.committed(0.01, 2)
    m.timer_fired(0.1)
    m.lease_expired("workflow")
    m.lease_taken_over("workflow")
    m.approval_decided("t", "approved", 5.0)
    m.quota_refused("t", "max_concurrent_runs")
    m.schedule_fired("t", "started", 1.0)
    gauges = StoreGauges(store=None, clock=time.time, ttl=3600)  # type: ignore[arg-type]
    gauges.runs = [RunCount("t", "w", "running", 1)]
    gauges.queues = [QueueGauge("t", "q", "activity", 1, time.time())]
    gauges.schedules = [ScheduleCount("t", "active", 1)]
    gauges.now, gauges.read_at = time.time(), time.monotonic()
    registry.register(gauges)
    names: dict[str, set[str]] = {}
    for family in registry.collect():
        for sample in family.samples:
            names.setdefault(sample.name, set()).update(sample.labels)
    return names


def dashboard_exprs() -> list[str]:
    board: dict[str, Any] = json.loads((DEPLOY / "grafana" / "waypost-dashboard.json").read_text())
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    exprs += [v["definition"] for v in board["templating"]["list"] if "definition" in v]
    return exprs


def alert_exprs() -> list[str]:
    rules = yaml.safe_load((DEPLOY / "prometheus" / "alerts.yml").read_text())
    found = []
    for group in rules["groups"]:
        for rule in group["rules"]:
            assert {"alert", "expr", "for", "labels", "annotations"} <= rule.keys(), rule
            assert rule["annotations"]["summary"] and rule["annotations"]["description"]
            found.append(str(rule["expr"]))
    return found


def check(exprs: list[str], names: dict[str, set[str]]) -> None:
    for expr in exprs:
        used = set(SERIES.findall(expr))
        assert used, expr
        assert used <= names.keys(), f"{expr}: not exposed: {sorted(used - names.keys())}"
        for series, matchers in SELECTOR.findall(expr):
            labels = {m.split("=")[0].strip(" !~") for m in matchers.split(",") if m.strip()}
            assert labels <= names[series], f"{expr}: {series} has no {labels - names[series]}"
        known = set().union(*(names[s] for s in used))
        for clause in BY.findall(expr):
            labels = {label.strip() for label in clause.split(",")}
            assert labels <= known, f"{expr}: no series has {labels - known}"


def test_the_dashboard_uses_only_exposed_series() -> None:
    exprs = dashboard_exprs()
    assert len(exprs) >= 15
    check(exprs, exposed())


def test_the_alert_rules_use_only_exposed_series() -> None:
    exprs = alert_exprs()
    names = {
        "waypost_queue_oldest_age_seconds",
        "waypost_timer_lag_seconds_bucket",
        "waypost_runs",
        "waypost_approval_dwell_seconds_bucket",
        "waypost_lease_takeovers_total",
        "waypost_schedule_fire_lag_seconds_bucket",
        "waypost_schedule_fires_total",
    }
    assert names <= set().union(*(SERIES.findall(e) for e in exprs))
    check(exprs, exposed())


def test_the_check_catches_a_series_that_does_not_exist() -> None:
    names = exposed()
    for wrong in (
        "sum(waypost_runs_total)",
        'waypost_runs{queue="x"}',
        "sum by (queue) (waypost_runs)",
    ):
        try:
            check([wrong], names)
        except AssertionError:
            continue
        raise AssertionError(f"{wrong} passed the check")
