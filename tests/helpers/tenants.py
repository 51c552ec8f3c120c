"""What a tenant's record says before it holds anything."""

from __future__ import annotations

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
