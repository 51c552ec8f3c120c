"""The `approval` step type: people decide; a rejection or expiry goes to `on_reject` or
`on_expiry`, else fails the step. The step waits, so a migration may move it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from waypost.model import approvals as ap

from .walk import StepFailure, Walk, waiting


def _policy(approvers: Mapping[str, Any]) -> ap.Policy:
    users = tuple(approvers.get("users", ()))
    groups = tuple(approvers.get("groups", ()))
    veto = bool(approvers.get("veto", True))
    if approvers.get("all"):
        return ap.Policy("all", users, groups, len(users), veto)
    quorum = int(approvers.get("quorum", 1))
    return ap.Policy("quorum" if quorum > 1 else "any", users, groups, quorum, veto)


@waiting
async def run(
    walk: Walk, step_id: str, step: Mapping[str, Any], data: dict[str, Any], path: str
) -> str | None:
    shown = walk.mapping(step.get("input"), data, step_id, "input") or None
    try:
        policy = _policy(step["approvers"])
    except Exception as exc:  # a policy the model refuses (e.g. `all` with groups)
        raise StepFailure("invalid_approvers", f"step {step_id!r}: {exc}", step_id) from None
    decision = await walk.ctx.approval(
        step_id, approvers=policy, expires_in=step.get("expires_in"), data=shown
    )
    walk.store(
        step_id,
        step,
        data,
        {
            "outcome": decision.outcome,
            "approval_id": decision.approval_id,
            "votes": [
                {"principal": v.principal, "decision": v.decision, "comment": v.comment}
                for v in decision.votes
            ],
        },
    )
    if decision.outcome == ap.APPROVED:
        approved: str | None = step.get("next")
        return approved
    field = "on_reject" if decision.outcome == ap.REJECTED else "on_expiry"
    if field in step:
        handled: str = step[field]
        return handled
    what = "rejected" if decision.outcome == ap.REJECTED else "expired"
    raise StepFailure(what, f"the approval of step {step_id!r} was {what}", step_id)
