"""Approvals in the console: the signed-in approver's inbox, and deciding from it.

The inbox is the door's `ListApprovals` for the session's principal: an approver
sees the pending approvals it may decide now (the door narrows the request to
them, whatever the page asks); a principal that may read every approval of its
tenant (operator, auditor, viewer) also sees all that are pending.

Deciding goes through the same door operation as every other way of deciding:
`Decide` without a credential, as the signed-in principal, which the engine
holds to the rules a notification link's decision obeys (the approver must be
allowed to decide this approval now, re-checked; one vote per approver; the
quorum; a run's starter may not approve it). The form carries the session's CSRF
token and must come from this site. A notification's link (`/approve/...`) still
opens the credential's own page; both record the decision in the same place.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from waypost.errors import WaypostError
from waypost.model import operations as ops
from waypost.model.approvals import CLOSED_STATUSES, EXPIRED

from .pages import (
    NO_NOTICE,
    Notice,
    Visit,
    add_object_page,
    engine_of,
    not_done,
    not_shown,
    page,
    refusal,
    signed_form,
    signed_in,
)

router = APIRouter(include_in_schema=False)

LIMIT = 200


def policy_words(policy: Any) -> str:
    """Who decides an approval, in words: "1 of group purchasing-managers; the run's
    starter may not approve; one rejection rejects"."""
    if not isinstance(policy, dict):
        return str(policy)
    who = [str(u) for u in policy.get("users", [])]
    who += [f"group {g}" for g in policy.get("groups", [])]
    listed = ", ".join(who) or "nobody"
    if policy.get("kind") == "all":
        text = f"all of {listed}"
    else:
        text = f"{policy.get('count', 1)} of {listed}"
    if policy.get("segregation_of_duties", True):
        text += "; the run's starter may not approve"
    if policy.get("veto", True):
        text += "; one rejection rejects"
    if policy.get("excluded"):
        text += "; no longer: " + ", ".join(map(str, policy["excluded"]))
    return text


def decides(visit: Visit) -> bool:
    """Whether the session's principal is an approver (the door decides the rest)."""
    return visit.decides


DECIDED_READ = 200  # approvals read of each closed status (the store lists oldest first)
DECIDED_SHOWN = 50


def decided_at(approval: Any) -> Any:
    """When an approval was closed, as far as its record says: its last vote's time (an
    expired one: its expiry; one closed without a vote: its creation)."""
    times = [v["at"] for v in approval.votes if v.get("at") is not None]
    if times:
        return max(times, key=_seconds)
    if approval.status == EXPIRED and approval.expires_at is not None:
        return approval.expires_at
    return approval.created_at


def _seconds(value: Any) -> float:
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, int | float):
        return float(value)
    try:
        return datetime.fromisoformat(str(value)).timestamp()
    except ValueError:
        return 0.0


async def decided_approvals(request: Request, visit: Visit) -> tuple[list[Any], bool]:
    """The tenant's closed approvals, latest first (at most `DECIDED_SHOWN`), and
    whether some may be missing (a status had more than `DECIDED_READ`)."""
    engine = engine_of(request)
    found: list[Any] = []
    cut = False
    for status in sorted(CLOSED_STATUSES):
        some = await engine.execute(
            ops.ListApprovals(status=status, limit=DECIDED_READ), visit.principal
        )
        cut = cut or len(some) >= DECIDED_READ
        found += some
    found.sort(key=lambda a: _seconds(decided_at(a)), reverse=True)
    return found[:DECIDED_SHOWN], cut


@router.get("/approvals")
async def inbox(request: Request) -> Response:
    visit = await signed_in(request)
    engine = engine_of(request)
    mine: list[Any] = []
    others: list[Any] = []
    errors: list[str] = []
    status = 200
    if decides(visit):
        try:
            mine = await engine.execute(
                ops.ListApprovals(approver=visit.principal.subject, limit=LIMIT), visit.principal
            )
        except WaypostError as exc:
            status, message = refusal(exc)
            errors.append(message)
    if visit.principal.may(ops.APPROVAL_READERS):
        try:
            everyone = await engine.execute(ops.ListApprovals(limit=LIMIT), visit.principal)
            seen = {a.approval_id for a in mine}
            others = [a for a in everyone if a.approval_id not in seen]
        except WaypostError as exc:
            status, message = refusal(exc)
            errors.append(message)
    decided: list[Any] = []
    cut = False
    if visit.principal.may(ops.APPROVAL_READERS):
        try:
            decided, cut = await decided_approvals(request, visit)
        except WaypostError as exc:
            status, message = refusal(exc)
            errors.append(message)
    if not decides(visit) and not visit.principal.may(ops.APPROVAL_READERS):
        status, errors = 403, ["Your roles do not show approvals."]
    return page(
        "console/approvals.html",
        visit,
        status=status,
        nav="approvals",
        mine=mine,
        others=others,
        decided=decided,
        decided_cut=cut,
        decided_read=DECIDED_READ,
        decided_at=decided_at,
        reads_all=visit.principal.may(ops.APPROVAL_READERS),
        errors=errors,
        decides=decides(visit),
    )


async def _approval_page(
    request: Request,
    visit: Visit,
    approval_id: str,
    notice: Notice = NO_NOTICE,
) -> Response:
    try:
        approval = await engine_of(request).execute(
            ops.GetApproval(approval_id=approval_id), visit.principal
        )
    except WaypostError as exc:
        return not_shown(visit, exc, "Approval not shown", notice)
    voted = any(v.get("principal") == visit.principal.subject for v in approval.votes)
    return page(
        "console/approval.html",
        visit,
        nav="approvals",
        approval=approval,
        may_decide=decides(visit) and approval.status == "pending" and not voted,
        voted=voted,
        who_decides=policy_words(approval.policy),
        **notice.values(),
    )


add_object_page(router, "/approvals/{approval_id:id}", _approval_page)


@router.post("/approvals/{approval_id:id}")
async def decide(request: Request, approval_id: str) -> Response:
    visit, form, refused = await signed_form(request)
    if refused is not None:
        return refused
    decision = form.get("decision")
    comment = form.get("comment")
    try:
        receipt = await engine_of(request).execute(
            ops.Decide(
                approval_id=approval_id,
                decision=decision or "",
                comment=comment or "",
            ),
            visit.principal,
        )
    except WaypostError as exc:
        return await _approval_page(request, visit, approval_id, not_done(exc, "Not recorded."))
    visit = await signed_in(request)  # the navigation's count without this approval
    verb = "Approved" if receipt.decision == "approve" else "Rejected"
    if receipt.outcome == "pending":
        outcome = "Your vote is counted; the approval waits for more votes."
    else:
        outcome = f"The approval is {receipt.outcome}, and the run goes on."
    return await _approval_page(request, visit, approval_id, Notice(f"{verb}. {outcome}"))
