"""A tenant's quotas: how much of a shared engine one tenant may hold or ask for.

`Quotas` is the record; the engine's `quotas` option gives the defaults and a
tenant's row (`tenants.quotas`, JSON) overrides some of them. The stored
overrides map a quota's name to a number, or to null for "unlimited"; a name
absent from them takes the engine's default. `effective` merges the two and is
pure, so the store applies exactly the same quotas as the engine reports.

Defaults: finite where enforcing costs nothing per step (the size of a payload,
the length and bytes of a history, the number of published definitions, schedules,
webhook sources, queues, users and keys, how often a schedule may fire), unlimited
where a limit has to be counted in the database on the hot path (concurrent runs,
the start rate, activities in flight, pending timers, the bytes of all of a
tenant's live runs). A shared platform sets those for all tenants through the
`quotas` option, or per tenant, and pays the count only where one is set.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from waypost.errors import InvalidRequest
from waypost.model.identity import preview
from waypost.model.numbers import finite

UNLIMITED = "unlimited"  # what the command line and JSON callers write for None
DEFAULT = "default"  # in `SetQuotas`: drop the tenant's override, take the engine's default
MAX_QUOTA = 2**53  # every count fits a float exactly (JSON numbers)


@dataclass(frozen=True)
class Quotas:
    """What one tenant may hold or ask for at once; None is unlimited.

    - `max_concurrent_runs`: runs not yet finished (running, waiting, paused,
      suspended). A start over it is refused (`QuotaExceeded`, HTTP 429).
    - `starts_per_second`, `start_burst`: a token bucket of starts (new runs; a
      start that finds its run again costs nothing). It holds `start_burst` tokens
      and refills at `starts_per_second`; a start with no token is refused with
      `retry_after` (seconds until the next token).
    - `max_concurrent_activities`: activity attempts running at once across every
      engine. More stay queued (not claimed) until one ends; the run shows why.
    - `max_events_per_run`: a run whose next decision would take its history (its
      current generation's) past this is suspended with a `QuotaExceeded` error that
      suggests `ctx.continue_as_new`; a signal to a run whose history is full is
      refused.
    - `max_pending_timers`: timers waiting to fire (sleeps, timeouts, approval
      expiries) across the tenant's runs. A run that would start more waits (its
      decision is made again a moment later) and shows why.
    - `max_payload_bytes`: a run's input or a signal's payload, in bytes of JSON
      (HTTP 413). None here means "as the tenant's `Limits` say": set, it wins.
    - `max_definitions`: published definition versions. A publish of a new
      version over it is refused.
    - `retention_days`: finished runs are purged this many days after they finished,
      by every engine's retention job (`retention_every`), leaving their summaries
      (`purged_runs`). None keeps them until someone purges them.
    - `max_run_bytes`: bytes of JSON of a run's history (its current generation's: every
      event's data, the input and signals included). A signal that would take it past
      is refused; a run whose own next decision would is suspended, as for
      `max_events_per_run` (results of the work it scheduled are always taken in).
    - `max_live_run_bytes`: the sum of `max_run_bytes`' measure over the tenant's runs
      not yet finished. A start or a signal that would take it past is refused.
    - `max_schedules`, `max_webhook_sources`, `max_queues` (configured queues),
      `max_users` (console users not disabled), `max_api_keys` (keys neither revoked
      nor expired): how many the tenant may have. Creating one more is refused.
    - `min_schedule_interval`: seconds; a schedule that would fire more often (`every`,
      or two fire times of its cron expression this close) is refused.
    """

    max_concurrent_runs: int | None = None
    starts_per_second: float | None = None
    start_burst: int = 100
    max_concurrent_activities: int | None = None
    max_events_per_run: int | None = 50_000
    max_pending_timers: int | None = None
    max_payload_bytes: int | None = None
    max_definitions: int | None = 10_000
    retention_days: int | None = None
    max_run_bytes: int | None = 64 * 1024 * 1024
    max_live_run_bytes: int | None = None
    max_schedules: int | None = 1_000
    max_webhook_sources: int | None = 100
    max_queues: int | None = 1_000
    max_users: int | None = 1_000
    max_api_keys: int | None = 1_000
    min_schedule_interval: int | None = 60

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is None and f.name != "start_burst":
                continue
            problem = _problem(f.name, value)
            if problem:
                raise ValueError(f"Quotas.{f.name} {problem}")

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    def effective(self, overrides: Mapping[str, Any]) -> Quotas:
        """These defaults with a tenant's stored overrides (unknown names and values
        that are not quotas are ignored: a damaged row limits nothing new)."""
        changes: dict[str, Any] = {}
        for name in self.names():
            if name not in overrides:
                continue
            value = overrides[name]
            if value is None and name == "start_burst":
                continue
            if value is None or not _problem(name, value):
                changes[name] = value
        return dataclasses.replace(self, **changes) if changes else self

    def to_json(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.names()}


_AT_LEAST_ONE = frozenset(
    {
        "start_burst",
        "max_events_per_run",
        "max_payload_bytes",
        "retention_days",
        "max_run_bytes",
        "max_live_run_bytes",
        "min_schedule_interval",
    }
)


def _problem(name: str, value: Any) -> str:
    """What is wrong with `value` for quota `name` ("" if nothing)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "must be a number"
    if name == "starts_per_second":
        number = finite(value)
        if number is None or not 0 < number < MAX_QUOTA:
            return "must be a positive number of starts per second"
        return ""
    if not isinstance(value, int) and not (isinstance(value, float) and value.is_integer()):
        return "must be a whole number"
    low = 1 if name in _AT_LEAST_ONE else 0
    if not low <= value < MAX_QUOTA:
        return f"must be a whole number from {low}"
    return ""


def check_overrides(value: Any, *, field: str = "quotas") -> dict[str, Any]:
    """Quota overrides as a caller gives them: name -> number, None (unlimited) or
    "default" (drop the override). Unknown names and bad values are `InvalidRequest`."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidRequest("quotas must map quota names to numbers", field=field)
    known = Quotas.names()
    if len(value) > len(known):
        raise InvalidRequest(f"quotas: {len(value)} entries, there are {len(known)}", field=field)
    out: dict[str, Any] = {}
    for name, limit in value.items():
        if name not in known:
            raise InvalidRequest(
                f"unknown quota {preview(name)} (known: {', '.join(known)})", field=field
            )
        if limit == DEFAULT or limit is None:
            out[name] = limit
            continue
        if limit == UNLIMITED:
            out[name] = None
            continue
        problem = _problem(name, limit)
        if name == "start_burst" and limit is None:
            problem = "cannot be unlimited"
        if problem:
            raise InvalidRequest(
                f"quota {name} {problem}, not {preview(limit)} (or 'unlimited', 'default')",
                field=field,
            )
        out[name] = int(limit) if name != "starts_per_second" else float(limit)
    if out.get("start_burst", 1) is None:
        raise InvalidRequest("quota start_burst cannot be unlimited", field=field)
    return out


def apply_overrides(stored: Mapping[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
    """The stored overrides after `changes` (checked): "default" removes a name."""
    out = dict(stored)
    for name, value in changes.items():
        if value == DEFAULT:
            out.pop(name, None)
        else:
            out[name] = value
    return out
