"""The outbox: messages to send, such as approval requests.

A message is written in the transaction that makes it due, and sent after the
commit by whoever claims it; a message id is added once.
"""

from __future__ import annotations

from collections.abc import Sequence

from waypost.model.events import canonical_json

from ..rows import OutboxItem
from ..tx import OUTBOX, Tx
from .records import outbox_item_from_row


def add_outbox_item(tx: Tx, item: OutboxItem, now: float) -> None:
    """Queue `item` in this transaction (an id already queued is left as it is)."""
    tx.run(
        "insert_outbox",
        {
            "id": item.id,
            "tenant": item.tenant,
            "kind": item.kind,
            "payload": canonical_json(item.payload),
            "now": now,
        },
    )
    tx.notify(OUTBOX)


def add_outbox(tx: Tx, items: Sequence[OutboxItem], now: float) -> None:
    for item in items:
        add_outbox_item(tx, item, now)


def claim_outbox(tx: Tx, owner: str, now: float, limit: int, lease: float) -> list[OutboxItem]:
    rows = tx.all(
        "claim_outbox",
        {"owner": owner, "now": now, "limit": limit, "lease_until": now + lease},
    )
    return [outbox_item_from_row(r) for r in rows]


def finish_outbox(
    tx: Tx, item_id: str, owner: str, now: float, error: str | None, retry_at: float | None
) -> None:
    key = {"id": item_id, "owner": owner, "now": now}
    if error is None:
        tx.run("outbox_sent", key)
    elif retry_at is not None:
        tx.run("outbox_retry", {**key, "error": error[:2000], "retry_at": retry_at})
    else:
        tx.run("outbox_failed", {**key, "error": error[:2000]})
