"""Refused decisions: counted for the audit, with a bounded footprint.

Anyone may present a made-up credential, as often as they like; what that
leaves behind must not grow with it. Each distinct (principal, reason) of an
approval is one row of `approval_refusals` with a count, and one
`ApprovalRefused` event in the run's history, for the first `REFUSALS_KEPT`
of them; refusals beyond those are counted in the approval's overflow row
(principal and reason ''), with the details of the latest. So an auditor sees
every refusal counted, the history grows by at most `REFUSALS_KEPT` events
per approval, and the table by at most one row more.
"""

from __future__ import annotations

from typing import Any

from waypost.model import approvals as ap_model
from waypost.model.events import ApprovalRefused

from ..commits import RunCommit
from ..rows import Refusal
from ..tx import Tx
from .records import approval_from_row
from .runs import commit_run

MAX_REASON = 300  # reasons are waypost's own sentences; a bound all the same
OVERFLOW = ""  # principal and reason of the row counting refusals beyond those kept


def record_refusal(tx: Tx, r: Refusal) -> bool:
    row = tx.one("lock_approval", {"tenant": r.tenant, "approval_id": r.approval_id})
    if row is None:
        return False
    approval = approval_from_row(row, tx)
    reason = r.reason[:MAX_REASON]
    params: dict[str, Any] = {
        "tenant": r.tenant,
        "approval_id": r.approval_id,
        "principal": r.principal,
        "reason": reason,
        "decision": r.decision,
        "credential_id": r.credential_id,
        "auth": r.auth,
        "authenticated_by": r.authenticated_by,
        "now": r.at,
    }
    if tx.run("count_refusal", params) == 1:
        return False  # seen before: counted
    kept = tx.one("kept_refusals", params)
    if kept is not None and int(kept["kept"]) >= ap_model.REFUSALS_KEPT:
        overflow = {**params, "principal": OVERFLOW, "reason": OVERFLOW}
        if tx.run("count_refusal", overflow) != 1:
            tx.run("insert_refusal", overflow)
        return False
    tx.run("insert_refusal", params)
    refused = ApprovalRefused(
        approval_id=r.approval_id,
        step=approval.step,
        principal=r.principal,
        decision=r.decision,
        auth=r.auth,
        authenticated_by=r.authenticated_by,
        credential_id=r.credential_id,
        reason=reason,
    )
    commit_run(
        tx,
        RunCommit(
            tenant=r.tenant,
            run_id=approval.run_id,
            events=[refused.at(r.at)],
            now=r.at,
        ),
    )
    return True


def approval_refusals(tx: Tx, tenant: str, approval_id: str) -> list[dict[str, Any]]:
    rows = tx.all("approval_refusals", {"tenant": tenant, "approval_id": approval_id})
    return [
        {
            "principal": row["principal"] or None,
            "reason": row["reason"] or "more refusals than are kept one by one",
            "decision": row["decision"],
            "credential_id": row["credential_id"],
            "auth": row["auth"],
            "authenticated_by": row["authenticated_by"],
            "count": int(row["attempts"]),
            "first_at": row["first_at"],
            "last_at": row["last_at"],
        }
        for row in rows
    ]
