"""Named queues: what an activity's tasks wait in, and the limits a tenant sets on one.

A run started on a queue (a workflow queue) is `enqueued` until the same limits admit it:
they count the queue's runs admitted and not finished, apart from its attempts.

An activity names its queue (`@activity(queue="payments")`); one that names none waits
in `DEFAULT_QUEUE`. A queue without a row has no limits. Its row holds, per tenant, at
most `concurrency` attempts leased at once (across every engine: the claim counts them
in the database) and at most `rate` = (N, period) attempts started per period (a token
bucket of N tokens refilled over the period).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from waypost.errors import InvalidRequest
from waypost.model.identity import preview
from waypost.model.numbers import finite, whole_number

DEFAULT_QUEUE = "default"
MAX_CONCURRENCY = 1_000_000
MAX_RATE_COUNT = 1_000_000
MAX_RATE_PERIOD = 366 * 86400.0  # a year: a longer period is surely a mistake
MIN_RATE_PERIOD = 0.001

_NAME = re.compile(r"^[A-Za-z0-9_.:\-]{1,200}$")

WORKER_TTL = 6.0
"""A worker whose last heartbeat is older than this is taken for gone (its row in
`workers` no longer counts as serving anything)."""
SERVES_PREFIX = "named:"
"""In a worker's heartbeat, `named:<queue>` says it takes attempts of that named queue
(its other entries are the task queues it claims, which hold no ':'-prefixed name)."""


def serves_entry(name: str) -> str:
    """The heartbeat entry saying a worker takes attempts of named queue `name`."""
    return f"{SERVES_PREFIX}{name}"


def check_queue_name(name: Any, field: str = "queue") -> str:
    """A queue's name: 1-200 letters, digits, '_', '-', '.', ':'."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise InvalidRequest(
            f"a queue's name is 1-200 letters, digits, '_', '-', '.', ':', not {preview(name)}",
            field=field,
        )
    return name


def check_concurrency(value: Any, field: str = "concurrency") -> int | None:
    """At most this many attempts of the queue at once: None (no limit) or 1..1,000,000."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_CONCURRENCY:
        raise InvalidRequest(
            f"{field} must be a whole number from 1 to {MAX_CONCURRENCY} (or none for no "
            f"limit), not {preview(value)}",
            field=field,
        )
    return value


def check_rate(value: Any) -> tuple[int, float] | None:
    """At most N starts per period seconds: None (no limit) or (N, period)."""
    if value is None:
        return None
    if not isinstance(value, list | tuple) or len(value) != 2:
        raise InvalidRequest(
            f"rate must be a pair (N, period in seconds), not {preview(value)}", field="rate"
        )
    count, period = value
    whole_number(count, "rate's N", 1, MAX_RATE_COUNT, field="rate")
    if (
        isinstance(period, bool)
        or not isinstance(period, int | float)
        or finite(period) is None
        or not MIN_RATE_PERIOD <= period <= MAX_RATE_PERIOD
    ):
        raise InvalidRequest(
            f"rate's period must be a number of seconds from {MIN_RATE_PERIOD:g} to "
            f"{MAX_RATE_PERIOD:g}, not {preview(period)}",
            field="rate",
        )
    return count, float(period)


def activity_queue(spec: Any) -> str:
    """The queue an activity's scheduled attempt waits in (its spec's `queue`)."""
    named = spec.get("queue") if isinstance(spec, dict) else None
    return named if isinstance(named, str) and _NAME.fullmatch(named) else DEFAULT_QUEUE


def refill(tokens: float, refilled_at: float, rate: tuple[int, float], now: float) -> float:
    """A bucket of `rate[0]` tokens, refilled at rate[0] per rate[1] seconds, at `now`."""
    count, period = rate
    return min(float(count), tokens + max(0.0, now - refilled_at) * count / period)


@dataclass(frozen=True)
class QueueInfo:
    """A named queue of a tenant: its limits and what it holds now."""

    name: str
    concurrency: int | None
    """At most this many attempts leased at once, across every engine (None: no limit)."""
    rate: tuple[int, float] | None
    """At most N attempts started per period seconds (None: no limit)."""
    depth: int
    """Attempts waiting to be claimed (ready, or backing off before a retry)."""
    running: int
    """Attempts leased now (a crashed engine's count until its lease lapses)."""
    oldest_age: float | None
    """Seconds the longest-waiting claimable attempt has waited (None: none waits)."""
    key_concurrency: int | None = None
    """At most this many attempts at once of the runs with one `concurrency_key` (None: no
    limit per key)."""
    worker_concurrency: int | None = None
    """At most this many attempts of the queue held at once by one engine (None: no limit
    per engine)."""
    runs_enqueued: int = 0
    """Runs started on the queue (a workflow queue) that wait for admission."""
    runs_admitted: int = 0
    """Runs of the queue admitted and not finished: what its concurrency counts."""
    configured: bool = False
    updated_at: datetime | None = None
    updated_by: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "concurrency": self.concurrency,
            "rate": list(self.rate) if self.rate is not None else None,
            "key_concurrency": self.key_concurrency,
            "worker_concurrency": self.worker_concurrency,
            "depth": self.depth,
            "running": self.running,
            "oldest_age": self.oldest_age,
            "runs_enqueued": self.runs_enqueued,
            "runs_admitted": self.runs_admitted,
            "configured": self.configured,
            "updated_at": self.updated_at.isoformat() if self.updated_at else None,
            "updated_by": self.updated_by,
        }
