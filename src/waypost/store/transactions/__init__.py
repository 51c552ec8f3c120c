"""The store's transactions, written once for every SQL dialect.

Each function runs inside one database transaction given as a `Tx` (see
`store/tx.py`: the connection and the dialect's named queries; the dialect's
store begins and commits the transaction). A failed condition raises `Abort`,
which the store turns into a rollback of just that request and an answer that
names the failed condition (a `CommitResult` with its `Conflict`, say).

By domain, each module importing only those listed before it:

    records.py        rows into records, by column name
    quotas.py         a tenant's quotas in admissions, and what it holds
    outbox.py         messages to send after the commit
    approval_rows.py  the approval rows a run's commit writes
    definitions.py    published workflow definitions
    children.py       child runs started and ended inside a run's commit (runs.py calls it)
    runs.py           create, commit and read runs; history; a run's tasks; pages
    queues.py         named queues' limits at claim time, and what they hold
    workflow_queues.py  runs enqueued on a workflow queue, admitted under its limits
    tasks.py          claim and lease tasks, workers
    timers.py         fire due timers, a batch at a time
    approvals.py      decide, change approvers, credentials, votes
    directory.py      the built-in groups, and what membership changes do to credentials
    refusals.py       refused decisions, counted and bounded
    access.py         tenants and their API keys
    webhooks.py       signal-with-start; webhook sources and deliveries by correlation
    retention.py      finished runs purged, and the summaries they leave
    encryption.py     a run's payloads re-encrypted under the current key
    audits.py         a run judged whole for verify; legacy runs bound to their id
    gauges.py         counts across tenants for metrics read at scrape time

The functions `SqlStore` calls are re-exported here.
"""

from __future__ import annotations

from .access import (
    api_key_to_authenticate,
    create_api_key,
    create_tenant,
    list_api_keys,
    list_tenants,
    revoke_api_key,
    touch_api_key,
)
from .approvals import (
    approval_votes,
    change_approvers,
    decide_approval,
    get_approval,
    get_credential,
    group_members,
    issue_credentials,
    list_approvals,
    look_up_credential,
)
from .audits import audit_run, seal_legacy_run
from .children import run_links
from .definitions import get_definition, list_definitions, publish_definition
from .directory import add_group_members, list_groups, remove_group_members
from .encryption import reencrypt_run, run_ids_after
from .gauges import queue_gauges, queue_loads, run_counts
from .outbox import add_outbox, claim_outbox, finish_outbox
from .queues import configure_queue, list_queues
from .quotas import set_quotas, tenant_quotas, tenant_state
from .refusals import approval_refusals, record_refusal
from .retention import (
    count_purgeable,
    finished_run_tenants,
    get_purged_run,
    list_purged_runs,
    purge_runs,
)
from .run_pages import list_runs, page_runs
from .runs import (
    admit_enqueued,
    commit_run,
    commit_run_in_full,
    create_run,
    get_run,
    history_page,
    load_history,
    load_idle_run,
    load_run,
    run_outlooks,
    run_tasks,
)
from .tasks import (
    beat_worker,
    claim_tasks,
    expired_activities,
    live_workers,
    release_owner,
    release_tasks,
    remove_worker,
    renew_leases,
    retime_activity,
)
from .timers import fire_due_timers, next_timer_at
from .webhooks import (
    create_webhook_source,
    delete_webhook_source,
    deliver_correlated,
    list_webhook_sources,
    reencrypt_webhook_secrets,
    signal_with_start,
    webhook_source,
)

__all__ = [
    "add_group_members",
    "add_outbox",
    "admit_enqueued",
    "api_key_to_authenticate",
    "approval_refusals",
    "approval_votes",
    "audit_run",
    "beat_worker",
    "change_approvers",
    "claim_outbox",
    "claim_tasks",
    "commit_run",
    "commit_run_in_full",
    "configure_queue",
    "count_purgeable",
    "create_api_key",
    "create_run",
    "create_tenant",
    "create_webhook_source",
    "decide_approval",
    "delete_webhook_source",
    "deliver_correlated",
    "expired_activities",
    "finish_outbox",
    "finished_run_tenants",
    "fire_due_timers",
    "get_approval",
    "get_credential",
    "get_definition",
    "get_purged_run",
    "get_run",
    "group_members",
    "history_page",
    "issue_credentials",
    "list_api_keys",
    "list_approvals",
    "list_definitions",
    "list_groups",
    "list_purged_runs",
    "list_queues",
    "list_runs",
    "list_tenants",
    "list_webhook_sources",
    "live_workers",
    "load_history",
    "load_idle_run",
    "load_run",
    "look_up_credential",
    "next_timer_at",
    "page_runs",
    "publish_definition",
    "purge_runs",
    "queue_gauges",
    "queue_loads",
    "record_refusal",
    "reencrypt_run",
    "reencrypt_webhook_secrets",
    "release_owner",
    "release_tasks",
    "remove_group_members",
    "remove_worker",
    "renew_leases",
    "retime_activity",
    "revoke_api_key",
    "run_counts",
    "run_ids_after",
    "run_links",
    "run_outlooks",
    "run_tasks",
    "seal_legacy_run",
    "set_quotas",
    "signal_with_start",
    "tenant_quotas",
    "tenant_state",
    "touch_api_key",
    "webhook_source",
]
