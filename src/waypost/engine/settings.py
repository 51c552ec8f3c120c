"""How one engine runs: its identity, its clock, its fault plan and its limits."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from waypost.errors import ConfigurationError
from waypost.model.chain import PLAIN, Chain
from waypost.model.observe import NO_OBSERVER, Observer
from waypost.model.quotas import Quotas

from .faults import FaultPlan


@dataclass(frozen=True)
class Settings:
    """The options of one engine, checked once (see `AsyncEngine` for what each means)."""

    owner: str
    clock: Callable[[], float]
    faults: FaultPlan
    lease: float = 30.0
    poll_interval: float = 0.5
    cache_size: int = 1000
    max_activities: int = 100
    max_workflows: int = 128
    activity_threads: int = 32
    shutdown_grace: float = 30.0
    cancel_grace: float | None = 30.0  # a cancelled run ends this long after, at the latest
    serve_definitions: bool = True
    serve_code: bool = True  # run registered workflows' and activities' tasks here
    chain: Chain = PLAIN  # how histories are hashed, and checked before replay
    quotas: Quotas = field(default_factory=Quotas)  # every tenant's, unless its row overrides
    retention_every: float | None = 3600.0  # seconds between retention passes; None: never
    # A run whose workflow task, or one activity step, lost its engine (the lease lapsed)
    # this many times without getting through is suspended as a poison run.
    max_lapses: int = 5
    observer: Observer = NO_OBSERVER  # told what is worth counting (metrics)
    # The compute lane (compute.py): its threads, the CPU seconds one call may take
    # (None: no limit), and the callers' requests a tenant may have waiting there.
    compute_threads: int = 2
    compute_cpu_limit: float | None = 10.0
    max_compute_waiting: int = 8

    def __post_init__(self) -> None:
        if self.retention_every is not None and not self.retention_every > 0:
            raise ConfigurationError("retention_every must be positive (or None)")
        if self.lease <= 0 or self.poll_interval <= 0:
            raise ConfigurationError("lease and poll_interval must be positive")
        if (
            self.cache_size < 0
            or self.max_activities < 1
            or self.activity_threads < 1
            or self.max_workflows < 1
            or self.max_lapses < 1
        ):
            raise ConfigurationError(
                "cache_size must be >= 0; max_activities, max_workflows, activity_threads "
                "and max_lapses >= 1"
            )
        if self.compute_threads < 1 or self.max_compute_waiting < 1:
            raise ConfigurationError("compute_threads and max_compute_waiting must be >= 1")
        if self.compute_cpu_limit is not None and not 0 < self.compute_cpu_limit < float("inf"):
            raise ConfigurationError(
                f"compute_cpu_limit must be None or a finite number of seconds > 0, "
                f"not {self.compute_cpu_limit!r}"
            )
        if self.cancel_grace is not None and not 0 <= self.cancel_grace < float("inf"):
            raise ConfigurationError(
                f"cancel_grace must be None or a finite duration >= 0, not {self.cancel_grace!r}"
            )
