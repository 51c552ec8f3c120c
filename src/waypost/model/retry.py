"""Retry policy of an activity: how many attempts, how far apart."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any


@dataclass(frozen=True)
class Retry:
    """When to try a failed activity again.

    The n-th retry waits `initial_interval * backoff**(n-1)`, capped at
    `max_interval`, less a random share of up to `jitter` of it so that
    many failing steps do not retry in lockstep. Errors whose type is in
    `non_retryable` (or that subclass `waypost.NonRetryableError`) fail the
    activity at once. `max_attempts=None` retries for as long as the errors are
    retryable (Temporal's default; waypost's is 3 attempts).
    """

    max_attempts: int | None = 3
    initial_interval: timedelta | float = timedelta(seconds=1)  # a number: seconds
    backoff: float = 2.0
    max_interval: timedelta | float = timedelta(minutes=5)
    non_retryable: tuple[type[BaseException] | str, ...] = field(default_factory=tuple)
    jitter: float = 0.2

    def __post_init__(self) -> None:
        for name in ("initial_interval", "max_interval"):
            value = getattr(self, name)
            if isinstance(value, int | float) and not isinstance(value, bool):
                try:
                    object.__setattr__(self, name, timedelta(seconds=value))  # seconds, as given
                except (OverflowError, ValueError):
                    raise ValueError(
                        f"Retry.{name} must be a finite number of seconds, got {value!r}"
                    ) from None
            elif not isinstance(value, timedelta):
                raise ValueError(
                    f"Retry.{name} must be a timedelta or a number of seconds, got {value!r}"
                )
        attempts = self.max_attempts
        if attempts is not None and (isinstance(attempts, bool) or not isinstance(attempts, int)):
            raise ValueError(
                f"Retry.max_attempts must be a whole number, or None for no limit, got {attempts!r}"
            )
        if attempts is not None and attempts < 1:
            raise ValueError(f"Retry.max_attempts must be at least 1, got {attempts}")
        for name in ("backoff", "jitter"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"Retry.{name} must be a number, got {value!r}")
        if not (math.isfinite(self.backoff) and self.backoff >= 1):
            raise ValueError(f"Retry.backoff must be at least 1.0, got {self.backoff}")
        if not 0 <= self.jitter <= 1:
            raise ValueError(f"Retry.jitter must be between 0 and 1, got {self.jitter}")
        if _seconds(self.initial_interval) < 0 or _seconds(self.max_interval) < 0:
            raise ValueError("Retry intervals must not be negative")

    def allows(self, attempt: int) -> bool:
        """Whether another attempt may follow attempt number `attempt` (if it failed)."""
        return self.max_attempts is None or attempt < self.max_attempts

    def delay(self, failed_attempt: int, rand: float) -> float:
        """Seconds to wait after attempt `failed_attempt` failed (`rand` in [0, 1))."""
        try:
            growth = self.backoff ** max(0, failed_attempt - 1)
        except OverflowError:
            growth = math.inf
        interval = _seconds(self.initial_interval)
        base = min(interval * growth, _seconds(self.max_interval)) if interval else 0.0
        return base * (1 - self.jitter * rand)

    def non_retryable_names(self) -> list[str]:
        return sorted(t if isinstance(t, str) else t.__name__ for t in self.non_retryable)

    def is_non_retryable(self, error_type: str, mro_names: tuple[str, ...] = ()) -> bool:
        names = set(self.non_retryable_names())
        return error_type in names or any(n in names for n in mro_names)

    def to_json(self) -> dict[str, Any]:
        return {
            "max_attempts": self.max_attempts,
            "initial_interval": _seconds(self.initial_interval),
            "backoff": self.backoff,
            "max_interval": _seconds(self.max_interval),
            "non_retryable": self.non_retryable_names(),
            "jitter": self.jitter,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Retry:
        return cls(
            max_attempts=None if data["max_attempts"] is None else int(data["max_attempts"]),
            initial_interval=timedelta(seconds=float(data["initial_interval"])),
            backoff=float(data["backoff"]),
            max_interval=timedelta(seconds=float(data["max_interval"])),
            non_retryable=tuple(data.get("non_retryable", ())),
            jitter=float(data.get("jitter", 0.2)),
        )


def _seconds(interval: timedelta | float) -> float:
    return interval.total_seconds() if isinstance(interval, timedelta) else float(interval)
