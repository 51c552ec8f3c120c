"""The approval rows a run's commit writes: a new approval, an escalation, a close.

`commit_run` (in `runs.py`) calls these, and `approvals.py` builds on both, so
they sit below either module.
"""

from __future__ import annotations

import json

from waypost.model import approvals as ap_model
from waypost.model.encryption import approval_place
from waypost.model.events import canonical_json

from ..commits import RunCommit
from ..rows import NewApproval, OutboxItem
from ..tx import Row, Tx
from .outbox import add_outbox_item
from .records import approval_from_row, opened, sealed
from .row_checks import approval_mac

APPROVAL_REQUESTED = "approval.requested"  # the outbox message that asks the approvers


def insert_approval(tx: Tx, c: RunCommit, a: NewApproval) -> None:
    """Open the approval a run's step asks for, and queue the message asking its approvers."""
    data = canonical_json(a.data)
    row = {
        "tenant": c.tenant,
        "approval_id": a.approval_id,
        "run_id": c.run_id,
        "step": a.step,
        "timer_step": a.timer_step,
        "name": a.name,
        "policy": canonical_json(a.policy),
        "started_by": a.started_by,
        "expires_at": a.expires_at,
    }
    n = tx.run(
        "insert_approval",
        {
            **row,
            "data": sealed(tx.keys, data, approval_place(c.tenant, c.run_id, a.approval_id)),
            "mac": approval_mac(tx.chain, row, data),
            "now": c.now,
        },
    )
    if n:
        # Who is asked is worked out when the message is sent (groups are
        # resolved then); the credentials are made then too, never stored in clear.
        add_outbox_item(
            tx,
            OutboxItem(
                id=f"{a.approval_id}:requested",
                tenant=c.tenant,
                kind=APPROVAL_REQUESTED,
                payload={"approval_id": a.approval_id},
                attempts=0,
            ),
            c.now,
        )


def escalate_approval(tx: Tx, tenant: str, approval_id: str, group: str, now: float) -> None:
    """Let `group` decide too, and notify its members (those not asked already).

    Escalation never asks for fewer approvals (`Policy.escalated`): an "all of"
    policy still needs each of its users, the group's members decide in addition.
    """
    key = {"tenant": tenant, "approval_id": approval_id}
    row = tx.one("lock_approval", key)
    if row is None or row["status"] != ap_model.PENDING:
        return
    approval_from_row(row, tx)  # BrokenRecord if its row fails its check: not acted on
    policy = ap_model.Policy.from_json(json.loads(row["policy"]))
    escalated = policy.escalated(group)
    if escalated != policy:
        set_approval_policy(tx, row, canonical_json(escalated.to_json()))
    add_outbox_item(
        tx,
        OutboxItem(
            id=f"{approval_id}:escalated:{group}",
            tenant=tenant,
            kind=APPROVAL_REQUESTED,
            payload={"approval_id": approval_id},
            attempts=0,
        ),
        now,
    )


def close_approval(tx: Tx, tenant: str, approval_id: str, status: str, now: float) -> bool:
    """Close a pending approval and revoke its unused credentials; False if not pending."""
    key = {"tenant": tenant, "approval_id": approval_id, "now": now}
    if tx.run("close_approval", {**key, "status": status}) != 1:
        return False
    tx.run("revoke_approval_credentials", key)
    return True


def set_approval_policy(tx: Tx, row: Row, policy_json: str) -> None:
    """Replace the policy of the pending approval of `row` (read and checked by the
    caller), and its row's check with it."""
    place = approval_place(row["tenant"], row["run_id"], row["approval_id"])
    columns = {k: row[k] for k in _CHECKED}
    tx.run(
        "set_approval_policy",
        {
            "tenant": row["tenant"],
            "approval_id": row["approval_id"],
            "policy": policy_json,
            "mac": approval_mac(
                tx.chain, {**columns, "policy": policy_json}, opened(tx.keys, row["data"], place)
            ),
        },
    )


_CHECKED = (
    "tenant",
    "approval_id",
    "run_id",
    "step",
    "timer_step",
    "name",
    "policy",
    "started_by",
    "expires_at",
)
