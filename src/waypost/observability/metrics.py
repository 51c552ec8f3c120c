"""The engine's events as Prometheus counters and histograms (an `Observer`).

Each call costs a dictionary look-up of the labelled child and its increment: the
children are made once per label values and kept (prometheus-client's `.labels()`
builds a tuple and takes a lock each time). Label values are tenant, workflow,
activity, queue, quota and outcome names: what operators alert on, never a run's data.

Names a tenant chooses (its own name, its workflows', its queues': `TENANT_LABELS`) are
shown only to a scraper trusted with them. `exposition(by_tenant=False)` answers every
series with those labels taken out and the series they told apart added up (the
largest of an age, the earliest of a creation time), so that an open /metrics tells
how much runs, not whose (see docs/observability.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, ProcessCollector
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from waypost.store import Store

from .gauges import StoreGauges

COMMIT_SECONDS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
COMMIT_EVENTS = (1, 2, 3, 4, 6, 8, 12, 16, 32, 64, 128)
TIMER_LAG = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300)
FIRE_LAG = (0.1, 0.5, 1, 2, 5, 10, 30, 60, 300, 900, 3600, 4 * 3600, 86400)
APPROVAL_DWELL = (1, 10, 60, 300, 900, 3600, 4 * 3600, 12 * 3600, 86400, 3 * 86400, 7 * 86400)
_END_COUNTERS = {"completed", "failed", "cancelled", "terminated"}
TENANT_LABELS = frozenset({"tenant", "workflow", "queue"})  # names a tenant chooses


def without_tenant_labels(metric: Metric) -> Metric:
    """`metric` with `TENANT_LABELS` taken out: the samples they told apart added up (an
    age's largest, a creation time's earliest)."""
    if not any(TENANT_LABELS & sample.labels.keys() for sample in metric.samples):
        return metric
    merged: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for sample in metric.samples:
        labels = tuple((k, v) for k, v in sample.labels.items() if k not in TENANT_LABELS)
        key = (sample.name, labels)
        if key not in merged:
            merged[key] = sample.value
        elif sample.name.endswith("_created"):
            merged[key] = min(merged[key], sample.value)
        elif metric.name.endswith("_age_seconds"):
            merged[key] = max(merged[key], sample.value)
        else:
            merged[key] = merged[key] + sample.value
    out = Metric(metric.name, metric.documentation, metric.type, metric.unit)
    for (name, labels), value in merged.items():
        out.add_sample(name, dict(labels), value)
    return out


class WithoutTenantLabels(Collector):
    """Every series of `registry`, with `TENANT_LABELS` taken out."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry

    def collect(self) -> Iterator[Metric]:
        for metric in self.registry.collect():
            yield without_tenant_labels(metric)


class Children:
    """The children of one labelled metric, made once per label values."""

    def __init__(self, metric: Any) -> None:
        self.metric = metric
        self.made: dict[tuple[str, ...], Any] = {}

    def __call__(self, *values: str) -> Any:
        child = self.made.get(values)
        if child is None:
            child = self.made[values] = self.metric.labels(*values)
        return child


class Metrics:
    """waypost's series in `registry` (its own, unless given): pass it as the engine's
    `observer`, and `watch_store` for the gauges read at scrape time."""

    def __init__(self, registry: CollectorRegistry | None = None, *, process: bool = True) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.gauges: StoreGauges | None = None
        if process:
            ProcessCollector(registry=self.registry)

        def counter(name: str, doc: str, *labels: str) -> Children:
            return Children(Counter(name, doc, labels, registry=self.registry))

        def histogram(name: str, doc: str, buckets: tuple[float, ...]) -> Any:
            return Histogram(name, doc, buckets=buckets, registry=self.registry)

        by_run = ("tenant", "workflow")
        self.started = counter("waypost_runs_started", "Runs created.", *by_run)
        self.ended = {
            outcome: counter(f"waypost_runs_{outcome}", f"Runs that ended {outcome}.", *by_run)
            for outcome in sorted(_END_COUNTERS)
        }
        self.suspended = counter(
            "waypost_runs_suspended", "Runs suspended for an operator.", *by_run
        )
        self.compensations = counter(
            "waypost_compensations",
            "Steps compensated by ending runs, by outcome (ok, failed).",
            *by_run,
            "outcome",
        )
        self.steps = counter("waypost_activity_steps", "Activity steps scheduled.", "activity")
        self.attempts = counter(
            "waypost_activity_attempts",
            "Activity attempts ended, by outcome (completed, failed, timeout, lost).",
            "activity",
            "outcome",
        )
        self.retries = counter(
            "waypost_activity_retries", "Failed attempts that another follows.", "activity"
        )
        self.timeouts = counter("waypost_activity_timeouts", "Attempts that timed out.", "activity")
        self.commit_seconds = histogram(
            "waypost_commit_seconds", "How long a run's commit took.", COMMIT_SECONDS
        )
        self.commit_events = histogram(
            "waypost_commit_events", "History events appended per commit.", COMMIT_EVENTS
        )
        self.timer_lag = histogram(
            "waypost_timer_lag_seconds", "A timer's firing minus its due time.", TIMER_LAG
        )
        self.expirations = counter(
            "waypost_lease_expirations", "Task leases whose holder stopped renewing.", "kind"
        )
        self.takeovers = counter(
            "waypost_lease_takeovers", "Tasks taken up after their lease lapsed.", "kind"
        )
        self.dwell = histogram(
            "waypost_approval_dwell_seconds",
            "From an approval's request to its decision.",
            APPROVAL_DWELL,
        )
        self.decided = counter(
            "waypost_approvals_decided", "Approvals decided, by outcome.", "tenant", "outcome"
        )
        self.refusals = counter(
            "waypost_quota_refusals",
            "Requests refused, or runs held, by a tenant's quota.",
            "tenant",
            "quota",
        )

        self.fires = counter(
            "waypost_schedule_fires",
            "Schedule fires handled, by outcome (started, caught_up, backfilled, triggered, "
            "skipped, buffered, not_started).",
            "tenant",
            "outcome",
        )
        self.fire_lag = histogram(
            "waypost_schedule_fire_lag_seconds",
            "A scheduled run's start minus its fire time (backfills left out).",
            FIRE_LAG,
        )

    # -- the gauges read at scrape time -------------------------------------------
    def watch_store(self, store: Store, clock: Callable[[], float], ttl: float = 2.0) -> None:
        """Read runs by status, the queues and schedules by state from `store` when
        scraped (at most every `ttl` seconds)."""
        self.gauges = StoreGauges(store, clock, ttl)
        self.registry.register(self.gauges)

    async def exposition(self, *, by_tenant: bool = True) -> tuple[bytes, str]:
        """The text to answer a scrape with, and its content type (on the engine's loop);
        without `by_tenant`, no series names a tenant, workflow or queue."""
        if self.gauges is not None:
            await self.gauges.refresh()
        source = self.registry if by_tenant else WithoutTenantLabels(self.registry)
        return generate_latest(source), CONTENT_TYPE_LATEST

    # -- Observer ------------------------------------------------------------------
    def run_started(self, tenant: str, workflow: str) -> None:
        self.started(tenant, workflow).inc()

    def run_ended(self, tenant: str, workflow: str, outcome: str) -> None:
        counter = self.ended.get(outcome)
        if counter is not None:
            counter(tenant, workflow).inc()

    def run_suspended(self, tenant: str, workflow: str) -> None:
        self.suspended(tenant, workflow).inc()

    def compensated(self, tenant: str, workflow: str, outcome: str, steps: int) -> None:
        self.compensations(tenant, workflow, outcome).inc(steps)

    def step_scheduled(self, activity: str) -> None:
        self.steps(activity).inc()

    def activity_attempt(self, activity: str, outcome: str, retrying: bool) -> None:
        self.attempts(activity, outcome).inc()
        if retrying:
            self.retries(activity).inc()
        if outcome == "timeout":
            self.timeouts(activity).inc()

    def committed(self, seconds: float, events: int) -> None:
        self.commit_seconds.observe(seconds)
        self.commit_events.observe(events)

    def timer_fired(self, lag: float) -> None:
        self.timer_lag.observe(max(0.0, lag))

    def lease_expired(self, kind: str) -> None:
        self.expirations(kind).inc()

    def lease_taken_over(self, kind: str) -> None:
        self.takeovers(kind).inc()

    def approval_decided(self, tenant: str, outcome: str, dwell: float) -> None:
        self.decided(tenant, outcome).inc()
        self.dwell.observe(max(0.0, dwell))

    def quota_refused(self, tenant: str, quota: str) -> None:
        self.refusals(tenant, quota).inc()

    def schedule_fired(self, tenant: str, outcome: str, lag: float | None) -> None:
        self.fires(tenant, outcome).inc()
        if lag is not None and outcome not in ("backfilled", "triggered"):
            self.fire_lag.observe(max(0.0, lag))
