"""A tenant's lifecycle in the store's vocabulary (the verbs are `Store`'s, in `base.py`):
disabled, enabled again, deleted a batch at a time.

A disabled tenant's row says since when (`disabled_at`); the claims of tasks, timers,
schedules and notifications leave its work where it is, and the lookups that
authenticate its keys and sessions read it. Deleting takes a disabled tenant's rows
table by table (`TENANT_TABLES`), at most a batch per transaction, its own row last.
"""

from __future__ import annotations

from dataclasses import dataclass

# Every table that holds a tenant's rows, in the order its deletion empties them (what
# points at a run before the run; the tenant's own row, and what authenticates, last).
TENANT_TABLES = (
    "tasks",  # first: a commit in flight then fails its fence and writes nothing more
    "timers",
    "correlations",
    "events",
    "approval_votes",
    "approval_refusals",
    "approval_credentials",
    "approvals",
    "runs",
    "purged_runs",
    "outbox",
    "schedules",
    "definitions",
    "group_members",
    "queues",
    "webhook_deliveries",
    "webhook_sources",
    "console_sessions",
    "users",
    "api_keys",
    "sign_in_attempts",
    "tenant_admission",
)


@dataclass(frozen=True)
class TenantPurge:
    """What one batch of a deletion did: `found` (the tenant's row exists, or existed
    when the batch began), `disabled`, the rows removed by table, and `done` (its row
    went too: nothing of it is left)."""

    found: bool
    disabled: bool
    deleted: dict[str, int]
    done: bool
