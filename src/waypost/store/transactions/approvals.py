"""Approvals: reading them, deciding, changing who decides, issuing credentials.

A decision and a change of approvers are recorded in the run's history through
`commit_run`, in the same transaction as the approval rows they change.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from waypost.model import approvals as ap_model
from waypost.model.events import (
    ApprovalDecided,
    ApproversChanged,
    canonical_json,
)
from waypost.model.identity import normal_identity

from ..commits import RunCommit, WorkflowTaskOp
from ..rows import (
    ApprovalRecord,
    ApproverChange,
    CredentialLookup,
    CredentialRecord,
    DecideRequest,
    DecideResult,
    NewCredential,
    OutboxItem,
)
from ..tx import Abort, Tx
from .approval_rows import close_approval, set_approval_policy
from .outbox import add_outbox_item
from .records import approval_from_row, credential_from_row, vote_from_row
from .runs import commit_run


def get_approval(tx: Tx, tenant: str, approval_id: str) -> ApprovalRecord | None:
    row = tx.one("get_approval", {"tenant": tenant, "approval_id": approval_id})
    return approval_from_row(row, tx) if row is not None else None


def list_approvals(
    tx: Tx,
    tenant: str | None,
    status: str | None = None,
    run_id: str | None = None,
    limit: int = 100,
) -> list[ApprovalRecord]:
    rows = tx.all(
        "list_approvals", {"tenant": tenant, "status": status, "run_id": run_id, "limit": limit}
    )
    return [approval_from_row(r, tx) for r in rows]


def get_credential(tx: Tx, tenant: str, credential_id: str) -> CredentialRecord | None:
    row = tx.one("get_credential", {"tenant": tenant, "credential_id": credential_id})
    return credential_from_row(row) if row is not None else None


def approval_votes(tx: Tx, tenant: str, approval_id: str) -> list[dict[str, Any]]:
    rows = tx.all("approval_votes", {"tenant": tenant, "approval_id": approval_id})
    return [vote_from_row(r) for r in rows]


def look_up_credential(tx: Tx, credential_id: str) -> CredentialLookup | None:
    """A credential by its id alone, whatever its tenant, with its approval; changes nothing.

    For the approval page, where a token is all the caller has: the secret
    check that follows is what authorises. One read: the credential, its
    approval and votes, whether the expiry timer fired, the database's clock.
    """
    row = tx.one("find_credential", {"credential_id": credential_id})
    if row is None:
        return None
    cred = credential_from_row(row)
    approval = get_approval(tx, cred.tenant, cred.approval_id)
    votes = approval_votes(tx, cred.tenant, cred.approval_id) if approval is not None else []
    fired = False
    if approval is not None and approval.timer_step is not None:
        timer = tx.one(
            "read_timer_status",
            {"tenant": cred.tenant, "run_id": approval.run_id, "step": approval.timer_step},
        )
        fired = timer is not None and timer["status"] == "fired"
    return CredentialLookup(cred, approval, votes, fired, database_clock(tx))


def database_clock(tx: Tx) -> float:
    """The database's time (seconds since the epoch), read in this transaction."""
    row = tx.one("clock", {})
    assert row is not None
    return float(row["now"])


def decide_approval(tx: Tx, d: DecideRequest) -> DecideResult:
    """Consume the credential, count the vote, and record it in the run's history.

    Every condition is checked here, in the transaction that writes: the approval
    is still pending and unexpired, the credential is still active, unexpired and
    unused (of two concurrent uses exactly one passes), and the principal may
    decide under the policy as it is now, by the directory as it is now (the
    built-in one read here) and has not voted. A failed condition rolls
    everything back.

    Without a credential (`credential_id` None: the principal signed in and decides
    as itself) every other condition holds the same; the approver's live
    credentials on the approval are spent with the decision, as a credential's
    other action is.

    Expiry is judged by the later of the database's clock and the deciding
    engine's: an engine whose clock is behind cannot accept an expired credential.
    """
    key = {"tenant": d.tenant, "approval_id": d.approval_id, "now": d.now}
    row = tx.one("lock_approval", key)
    if row is None:
        raise Abort(DecideResult(False, "unknown approval"))
    approval = approval_from_row(row, tx)
    clock = max(d.now, database_clock(tx))
    _check_open(tx, d, approval, clock)
    policy = ap_model.Policy.from_json(approval.policy)
    _check_may_decide(tx, d, approval, policy)
    if d.credential_id is not None and (
        tx.run("use_credential", {**key, "credential_id": d.credential_id, "clock": clock}) != 1
    ):
        raise Abort(DecideResult(False, "the credential was used, revoked or has expired"))
    # The credential for the other action is spent with it (without a credential, both
    # are): one decision per approver.
    tx.run("retire_approver_credentials", {**key, "approver": d.principal, "status": "used"})
    _insert_vote(tx, d)
    votes = approval_votes(tx, d.tenant, d.approval_id)
    outcome = ap_model.tally(
        policy,
        [ap_model.Vote(v["principal"], v["decision"]) for v in votes],
        _remaining(tx, d, approval, policy, votes),
    )
    resolved = outcome != ap_model.PENDING
    if resolved:
        close_approval(tx, d.tenant, d.approval_id, outcome, d.now)
    decided = ApprovalDecided(
        step=approval.step,
        approval_id=d.approval_id,
        principal=d.principal,
        decision=d.decision,
        comment=d.comment,
        credential_id=d.credential_id,
        auth=d.auth,
        authenticated_by=d.authenticated_by,
        outcome=outcome,
        votes=votes if resolved else None,
        # Let through only by the policy's `allow_unknown_starter`: said in the audit.
        starter_unknown=True if not approval.started_by and policy.segregation_of_duties else None,
    )
    res = commit_run(
        tx,
        RunCommit(
            tenant=d.tenant,
            run_id=approval.run_id,
            events=[decided.at(d.now)],
            now=d.now,
            require_active=True,
            workflow_op=WorkflowTaskOp.WAKE if resolved else WorkflowTaskOp.LEAVE,
        ),
    )
    return DecideResult(True, outcome=outcome, run_id=approval.run_id, seq=res.last_seq)


def _check_open(tx: Tx, d: DecideRequest, approval: ApprovalRecord, clock: float) -> None:
    """The approval still pending and unexpired, and the credential (if any) its own,
    active and unexpired, by `clock`."""
    if approval.status != ap_model.PENDING:
        raise Abort(DecideResult(False, f"the approval is {approval.status} already"))
    if approval.timer_step is not None:
        timer = tx.one(
            "timer_status",
            {"tenant": d.tenant, "run_id": approval.run_id, "step": approval.timer_step},
        )
        if timer is not None and timer["status"] == "fired":
            raise Abort(DecideResult(False, "the approval has expired"))
    if approval.expires_at is not None and approval.expires_at <= clock:
        raise Abort(DecideResult(False, "the approval has expired"))
    if d.credential_id is not None:
        cred = get_credential(tx, d.tenant, d.credential_id)
        if cred is None or cred.approval_id != d.approval_id:
            raise Abort(DecideResult(False, "unknown credential"))
        if cred.status != "active":
            raise Abort(DecideResult(False, f"the credential was {cred.status}"))
        if cred.expires_at is not None and cred.expires_at <= clock:
            raise Abort(DecideResult(False, "the credential has expired"))


def _check_may_decide(
    tx: Tx, d: DecideRequest, approval: ApprovalRecord, policy: ap_model.Policy
) -> None:
    """The principal may decide under the policy as it is now, by the directory as it is
    now (the built-in one read here, or the members the request brings), and has not
    voted."""
    if d.members is not None and not set(policy.groups) <= set(d.members):
        raise Abort(DecideResult(False, "the approval's approvers changed", stale=True))
    principal = normal_identity(d.principal)

    def member_of(group: str) -> bool:
        if d.members is not None:
            return principal in {normal_identity(m) for m in d.members[group]}
        return is_group_member(tx, d.tenant, group, principal)

    before = approval_votes(tx, d.tenant, d.approval_id)
    why_not = ap_model.refusal(
        policy,
        principal,
        started_by=approval.started_by,
        member_of=member_of,
        voted=[ap_model.Vote(v["principal"], v["decision"]) for v in before],
    )
    if why_not is not None:
        raise Abort(DecideResult(False, why_not, principal_refused=True))


def _insert_vote(tx: Tx, d: DecideRequest) -> None:
    voted = tx.run(
        "insert_vote",
        {
            "tenant": d.tenant,
            "approval_id": d.approval_id,
            "now": d.now,
            "principal": d.principal,
            "decision": d.decision,
            "comment": d.comment,
            # The column predates decisions without a credential: '' stands for none.
            "credential_id": d.credential_id or "",
            "auth": d.auth,
            "authenticated_by": d.authenticated_by,
        },
    )
    if voted != 1:
        raise Abort(
            DecideResult(
                False, f"{d.principal} has decided on this approval already", principal_refused=True
            )
        )


def _remaining(
    tx: Tx,
    d: DecideRequest,
    approval: ApprovalRecord,
    policy: ap_model.Policy,
    votes: Sequence[dict[str, Any]],
) -> int | None:
    """How many may still vote (allowed now, not voted): only a policy without veto needs it."""
    if policy.veto or policy.kind == "all":
        return None
    members: Mapping[str, Sequence[str]] = (
        d.members
        if d.members is not None
        else {g: group_members(tx, d.tenant, g) for g in policy.groups}
    )
    allowed = ap_model.eligible(policy, approval.started_by, members)
    return len(allowed - {normal_identity(v["principal"]) for v in votes})


def change_approvers(tx: Tx, c: ApproverChange) -> bool:
    key = {"tenant": c.tenant, "approval_id": c.approval_id, "now": c.now}
    row = tx.one("lock_approval", key)
    if row is None or row["status"] != ap_model.PENDING:
        return False
    approval = approval_from_row(row, tx)
    policy = ap_model.Policy.from_json(approval.policy)
    if c.revoke is not None:
        policy = policy.without(c.revoke)
    if c.add is not None:
        policy = policy.adding(c.add)
    set_approval_policy(tx, row, canonical_json(policy.to_json()))
    if c.revoke is not None:
        tx.run("retire_approver_credentials", {**key, "approver": c.revoke, "status": "revoked"})
    if c.add is not None:
        add_outbox_item(
            tx,
            OutboxItem(
                id=f"{c.approval_id}:notify:{c.add}:{c.now!r}",
                tenant=c.tenant,
                kind="approval.notify",
                payload={"approval_id": c.approval_id, "approver": c.add},
                attempts=0,
            ),
            c.now,
        )
    event = ApproversChanged(
        step=approval.step,
        approval_id=c.approval_id,
        revoked=c.revoke,
        added=c.add,
        by=c.by,
        reason=c.reason,
        policy=policy.to_json(),
    ).at(c.now)
    commit_run(
        tx,
        RunCommit(
            tenant=c.tenant, run_id=approval.run_id, events=[event], now=c.now, require_active=True
        ),
    )
    return True


def issue_credentials(
    tx: Tx,
    tenant: str,
    approval_id: str,
    approver: str,
    credentials: Sequence[NewCredential],
    now: float,
) -> ApprovalRecord | None:
    key = {"tenant": tenant, "approval_id": approval_id, "now": now}
    row = tx.one("lock_approval", key)
    if row is None or row["status"] != ap_model.PENDING:
        return None
    approval = approval_from_row(row, tx)
    # One usable pair per approver: a redelivery (or a second message to the same
    # person) replaces what was issued before. The approval row is locked, so two
    # issues at once take turns and the later one's pair is the one left.
    tx.run("retire_approver_credentials", {**key, "approver": approver, "status": "replaced"})
    for cred in credentials:
        tx.run(
            "insert_credential",
            {
                "tenant": tenant,
                "credential_id": cred.credential_id,
                "approval_id": approval_id,
                "approver": approver,
                "action": cred.action,
                "secret_hash": cred.secret_hash,
                "expires_at": approval.expires_at,
                "now": now,
            },
        )
    return approval


def group_members(tx: Tx, tenant: str, group: str) -> list[str]:
    rows = tx.all("group_members", {"tenant": tenant, "group_name": group})
    return [row["principal"] for row in rows]


def is_group_member(tx: Tx, tenant: str, group: str, principal: str) -> bool:
    """Whether the built-in directory has `principal` in `group` (read in this transaction)."""
    params = {"tenant": tenant, "group_name": group, "principal": principal}
    return tx.one("is_group_member", params) is not None
