"""Signals from outside that find their run: signal-with-start, and webhooks by correlation.

`signal_with_start` creates a run with its signal after RunStarted, or, when a run
has that id, commits the signal to it: one transaction, so of concurrent calls for
one run id exactly one creates it and every signal arrives (PostgreSQL makes a
second insert wait for the first).

`deliver_correlated` keeps the delivery id first (`INSERT ... ON CONFLICT DO
NOTHING`: a concurrent delivery of the same id waits for the first and then finds
it), then takes each waiting run's correlation row and appends the signal with
`commit_run`. Each run's workflow task is locked before its correlation row, the
order every commit of that run follows, so a delivery and the run's own commits
do not deadlock; a row the run withdrew meanwhile is skipped. A delivery that
reaches no run is rolled back whole, delivery id included: the sender's retry
may find a run waiting by then.
"""

from __future__ import annotations

import dataclasses

from waypost.errors import StoreContention
from waypost.model.encryption import Place, open_text
from waypost.model.events import canonical_json
from waypost.model.quotas import Quotas

from ..commits import CommitResult, CorrelatedDelivery, CreateRunResult, DeliveryResult, RunCommit
from ..effects import NewRun
from ..tx import Abort, Row, Tx, loads_nullable
from ..webhooks import WebhookSourceRecord
from .quotas import admit_one_more
from .records import reseal_column, sealed
from .runs import commit_run, create_run


def signal_with_start(
    tx: Tx, new: NewRun, signal: RunCommit
) -> tuple[CreateRunResult, CommitResult | None]:
    created = create_run(tx, new)
    if created.created or created.run.workflow != new.workflow:
        return created, None  # created with its signal; or refused by the caller, unwritten
    try:
        committed = commit_run(tx, signal)
    except Abort as abort:
        result: CommitResult = abort.result
        raise Abort((created, result)) from None
    return created, committed


# == webhook sources ===================================================================
def secret_place(tenant: str, source: str) -> Place:
    """Where a webhook source's secret lives (the associated data of its ciphertext)."""
    return (tenant, source, "webhook_source", "secret")


def create_webhook_source(
    tx: Tx, source: WebhookSourceRecord, quotas: Quotas | None = None
) -> bool:
    """Store the source (its secret sealed when the store has keys); False if the tenant
    has a source of that id. A `url_id` another source has is `StoreContention` (the
    caller draws another)."""
    key = {"tenant": source.tenant, "source": source.source}
    if tx.one("webhook_source_of_tenant", key) is not None:
        return False
    params = {
        **key,
        "url_id": source.url_id,
        "signal": source.signal,
        "corr_key": source.correlate_key,
        "corr_path": source.correlate_path,
        "tolerance": source.tolerance_seconds,
        "secret": sealed(tx.keys, source.secret, secret_place(source.tenant, source.source)),
        "now": source.created_at,
        "by": source.created_by,
    }
    if tx.run("insert_webhook_source", params) != 1:
        if tx.one("webhook_source_of_tenant", key) is not None:
            return False  # made meanwhile by a concurrent caller
        raise StoreContention("a webhook source's URL id was drawn twice; nothing was written")
    admit_one_more(tx, source.tenant, quotas, "max_webhook_sources", source.created_at)
    return True


def list_webhook_sources(tx: Tx, tenant: str) -> list[WebhookSourceRecord]:
    return [_source(row, tx) for row in tx.all("list_webhook_sources", {"tenant": tenant})]


def delete_webhook_source(tx: Tx, tenant: str, source: str) -> bool:
    if tx.run("delete_webhook_source", {"tenant": tenant, "source": source}) == 0:
        return False
    tx.run("delete_source_deliveries", {"tenant": tenant, "source": source})
    return True


def webhook_source(tx: Tx, url_id: str) -> WebhookSourceRecord | None:
    row = tx.one("webhook_source_by_url_id", {"url_id": url_id})
    return _source(row, tx) if row is not None else None


def _source(row: Row, tx: Tx) -> WebhookSourceRecord:
    tenant, source = row["tenant"], row["source"]
    return WebhookSourceRecord(
        source=source,
        tenant=tenant,
        signal=row["signal"],
        correlate_key=row["corr_key"],
        correlate_path=row["corr_path"],
        tolerance_seconds=int(row["tolerance"]),
        secret=open_text(tx.keys, row["secret"], secret_place(tenant, source)),
        created_at=row["created_at"],
        created_by=row["created_by"],
        url_id=row["url_id"],
    )


def reencrypt_webhook_secrets(tx: Tx, tenant: str, dry_run: bool) -> tuple[int, int]:
    """Each of the tenant's webhook sources' secret sealed under the current key (a
    plaintext one, stored before encryption was on, too): (sources, re-sealed). Each write
    is conditioned on the text read."""
    return reseal_column(
        tx,
        tenant,
        dry_run,
        "list_webhook_sources",
        ("source", "secret"),
        "reseal_webhook_secret",
        secret_place,
    )


# == deliveries ========================================================================
def deliver_correlated(tx: Tx, d: CorrelatedDelivery) -> DeliveryResult:
    ids = {"tenant": d.tenant, "source": d.source, "delivery_id": d.delivery_id}
    prune = {"tenant": d.tenant, "source": d.source, "before": d.keep_since}
    tx.run("prune_webhook_deliveries", prune)
    if tx.run("insert_webhook_delivery", {**ids, "now": d.now}) == 0:
        row = tx.one("webhook_delivery", ids)
        outcome = loads_nullable(row["outcome"]) if row is not None else None
        return DeliveryResult(duplicate=True, outcome=outcome if isinstance(outcome, dict) else {})
    waits = tx.all(
        "correlated_waits",
        {
            "tenant": d.tenant,
            "corr_key": d.key,
            "corr_value": d.value,
            "signal": d.signal,
            "limit": d.max_runs,
        },
    )
    delivered: list[tuple[str, CommitResult]] = []
    seen: set[str] = set()
    for wait in waits:
        run_id = wait["run_id"]
        if run_id in seen:
            continue  # one signal per run: its first wait takes it
        key = {"tenant": d.tenant, "run_id": run_id}
        tx.one("workflow_task", key)  # lock order: the run's task, then its correlation row
        if tx.run("delete_correlation", {**key, "step": wait["step"]}) == 0:
            continue  # the wait ended meanwhile
        seen.add(run_id)
        commit = dataclasses.replace(d.wake, run_id=run_id, events=[d.event])
        try:
            delivered.append((run_id, commit_run(tx, commit)))
        except Abort as abort:
            conflict = abort.result.conflict
            raise Abort(DeliveryResult(conflict=conflict, run_id=run_id)) from None
    if not delivered:
        raise Abort(DeliveryResult())
    outcome = {"runs": [run_id for run_id, _ in delivered]}
    tx.run("set_webhook_delivery_outcome", {**ids, "outcome": canonical_json(outcome)})
    return DeliveryResult(outcome=outcome, delivered=delivered)
