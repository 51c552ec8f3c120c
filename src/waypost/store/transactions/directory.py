"""The built-in directory: groups of approvers, and what a change of membership does
to the pending approvals that name the group.

Credentials follow membership, in the transaction that changes it: a member
removed from a group loses their active credentials on the pending approvals
naming it (unless the policy still allows them otherwise); a member added is
asked on those approvals, with fresh credentials, and whatever they held
before stays dead. The approvals are locked first (on PostgreSQL), so a
decision and a change of membership take turns.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from waypost.model import approvals as ap_model
from waypost.model.identity import normal_identity

from ..rows import OutboxItem
from ..tx import Row, Tx
from .approvals import approval_votes, is_group_member
from .outbox import add_outbox_item

NOTIFY = "approval.notify"  # the outbox message that asks one approver


def list_groups(tx: Tx, tenant: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for row in tx.all("list_groups", {"tenant": tenant}):
        out.setdefault(row["group_name"], []).append(row["principal"])
    return out


def add_group_members(
    tx: Tx, tenant: str, group: str, principals: Sequence[str], now: float
) -> int:
    """Add members; each new one is asked on the pending approvals naming the group."""
    added = [
        p
        for p in sorted(set(principals))
        if tx.run(
            "add_group_member", {"tenant": tenant, "group_name": group, "principal": p, "now": now}
        )
        == 1
    ]
    if not added:
        return 0
    for row in _pending_naming(tx, tenant, group):
        approval_id = row["approval_id"]
        voters = {normal_identity(v["principal"]) for v in approval_votes(tx, tenant, approval_id)}
        for principal in added:
            if principal in voters or not _allowed(tx, tenant, row, principal):
                continue
            if _allowed(tx, tenant, row, principal, besides=group):
                continue  # allowed (and asked) already as a listed user or by another group
            # Credentials from before a removal stay dead: the new message brings new ones.
            _retire(tx, tenant, approval_id, principal, now)
            add_outbox_item(
                tx,
                OutboxItem(
                    id=f"{approval_id}:notify:{principal}:{now!r}",
                    tenant=tenant,
                    kind=NOTIFY,
                    payload={"approval_id": approval_id, "approver": principal},
                    attempts=0,
                ),
                now,
            )
    return len(added)


def remove_group_members(
    tx: Tx, tenant: str, group: str, principals: Sequence[str], now: float
) -> int:
    """Remove members; their credentials on the pending approvals naming the group die."""
    removed = [
        p
        for p in sorted(set(principals))
        if tx.run("remove_group_member", {"tenant": tenant, "group_name": group, "principal": p})
        == 1
    ]
    if not removed:
        return 0
    for row in _pending_naming(tx, tenant, group):
        for principal in removed:
            if not _allowed(tx, tenant, row, principal):
                _retire(tx, tenant, row["approval_id"], principal, now)
    return len(removed)


def _pending_naming(tx: Tx, tenant: str, group: str) -> list[Row]:
    """The pending approvals whose policy names `group`, locked."""
    return tx.all("pending_approvals_naming_group", {"tenant": tenant, "group_name": group})


def _allowed(tx: Tx, tenant: str, row: Row, principal: str, besides: str | None = None) -> bool:
    """Whether `principal` may decide on the approval `row` by its policy and the directory
    (with `besides`, not counting their membership of that group)."""
    policy = ap_model.Policy.from_json(json.loads(row["policy"]))
    return (
        ap_model.refusal(
            policy,
            principal,
            started_by=row["started_by"],
            member_of=lambda g: g != besides and is_group_member(tx, tenant, g, principal),
            voted=(),
        )
        is None
    )


def _retire(tx: Tx, tenant: str, approval_id: str, principal: str, now: float) -> None:
    tx.run(
        "retire_approver_credentials",
        {
            "tenant": tenant,
            "approval_id": approval_id,
            "approver": principal,
            "status": "revoked",
            "now": now,
        },
    )
