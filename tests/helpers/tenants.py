"""What a tenant's record says before it holds anything."""

from __future__ import annotations

from typing import Any

# The usage of a tenant with nothing running, stored or configured.
NO_USAGE = {
    "running_runs": 0,
    "activities_in_flight": 0,
    "pending_timers": 0,
    "definitions": 0,
    "schedules": 0,
    "webhook_sources": 0,
    "queues": 0,
    "users": 0,
    "api_keys": 0,
}


def with_acme_quotas(engine: Any, quotas: dict[str, Any]) -> Any:
    """`engine`, once it has made tenant acme and set `quotas` for it."""
    engine.create_tenant("acme")
    engine.set_quotas("acme", quotas)
    return engine
