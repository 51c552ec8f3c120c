"""Re-encryption: a run's stored payloads moved to the current encryption key.

Every payload column of one run (its tasks' spec and heartbeat details, its
input, result and error, its events' data, its approvals' data) is opened with
whichever key sealed it and sealed again under the current key, in one
transaction, tasks before the run row as every transaction locks them. A value
already under the current key is left alone; a plaintext value (written before
encryption was turned on) is encrypted. The plaintext does not change, so
neither do the hash chain nor any record above the store. Each write is
conditioned on the text read: a value a commit replaced meanwhile was written
under the current key already.
"""

from __future__ import annotations

from typing import Any

from waypost.errors import ConfigurationError
from waypost.model.encryption import (
    Place,
    approval_place,
    event_place,
    run_place,
    task_place,
)

from ..rows import ResealCounts
from ..tx import Tx


def run_ids_after(tx: Tx, tenant: str, after: str, limit: int) -> list[str]:
    """Up to `limit` of the tenant's run ids that sort after `after`, in order."""
    rows = tx.all("run_ids_after", {"tenant": tenant, "after": after, "limit": limit})
    return [str(r["run_id"]) for r in rows]


def reencrypt_run(tx: Tx, tenant: str, run_id: str, dry_run: bool) -> ResealCounts | None:
    """Re-encrypt the run's payloads under the current key (None: no such run)."""
    keys = tx.keys
    if keys is None:
        raise ConfigurationError("re-encrypting needs encryption keys (WAYPOST_ENCRYPTION_KEYS)")
    key = {"tenant": tenant, "run_id": run_id}
    run = tx.one("run_payloads", key)
    if run is None:
        return None
    # (statement, its parameters, the text read, where the text lives)
    found: list[tuple[str, dict[str, Any], str | None, Place]] = []
    for t in tx.all("task_payloads", key):
        where = {**key, "kind": t["kind"], "step": t["step"]}
        for column in ("spec", "heartbeat_details"):
            place = task_place(tenant, run_id, t["step"], column)
            found.append((f"reseal_task_{column}", where, t[column], place))
    for column in ("input", "result", "error"):
        found.append((f"reseal_run_{column}", key, run[column], run_place(tenant, run_id, column)))
    for ev in tx.all("event_payloads", key):
        place = event_place(tenant, run_id, ev["seq"])
        found.append(("reseal_event", {**key, "seq": ev["seq"]}, ev["data"], place))
    for ap in tx.all("approval_payloads", key):
        where = {"tenant": tenant, "approval_id": ap["approval_id"]}
        found.append(
            (
                "reseal_approval",
                where,
                ap["data"],
                approval_place(tenant, run_id, ap["approval_id"]),
            )
        )
    values = resealed = 0
    for statement, params, text, place in found:
        if text is None:
            continue
        values += 1
        # A value under another key is opened first: a missing key or a forged ciphertext
        # stops the transaction rather than being sealed again as if it were good.
        new = keys.reseal(text, place)
        if new is None:
            continue
        resealed += 1
        if not dry_run:
            tx.run(statement, {**params, "old": text, "new": new})
    return ResealCounts(values, resealed)
