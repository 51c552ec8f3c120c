"""Human approval, the engine part: deciding, listing, changing approvers, the directory.

Workflow code asks with `ctx.approval(...)`; its commit stores the approval and
puts a message in the outbox (same transaction), which `outbox.py` turns into
notifications with credentials.

`decide` checks a credential's secret, then one conditional transaction judges
everything that can change (the approval still pending and unexpired by the
database's clock, the credential still active, the principal still allowed by
the policy and the directory as they are then), consumes the credential and
counts the vote. An accepted decision lands in the run's history; refused ones
are counted for the audit (`ApprovalInfo.refusals`), and the first of each kind
lands in the history too, so that made-up tokens cannot grow it without bound.

A principal signed in with its own key (not the embedded API) may also decide
without a credential, as itself: the same transaction judges it by the same
rules. `resolve` answers what an approval link's token may decide now, for the
page the link opens; it changes nothing and refuses every token that cannot
decide now with the one `InvalidCredential`.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from waypost.engine.ports import Machinery
from waypost.errors import (
    ApprovalNotFound,
    DecisionRefused,
    InvalidCredential,
    InvalidRequest,
    StoreError,
)
from waypost.model import approvals as ap, operations as ops
from waypost.model.identity import Principal, check_identity, normal_identity, preview
from waypost.model.logs import logger
from waypost.model.records import ApprovalInfo, CredentialView, DecisionReceipt
from waypost.model.requests import handles
from waypost.store.base import (
    ApprovalRecord,
    ApproverChange,
    CredentialLookup,
    DecideRequest,
    DecideResult,
    Refusal,
    Store,
)

from .room import Room
from .stored import answer_of, moment

log = logger("waypost.approvals")
audit_log = logger("waypost.audit")

# An approver's inbox is looked for among this many approvals of the tenant (the
# others' are skipped before anything more is read), then cut to the request's limit.
INBOX_SCAN = ops.MAX_LIMIT


class Directory(Protocol):
    """Who is in a group, asked at the moment it matters (never cached by the engine)."""

    async def members(self, tenant: str, group: str) -> list[str]: ...


class StoreDirectory:
    """The built-in directory: groups kept in the engine's database."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def members(self, tenant: str, group: str) -> list[str]:
        return await self.store.group_members(tenant, group)


class Approvals(Room):
    """The approval operations of one engine, and who may decide."""

    def __init__(self, machinery: Machinery, directory: Directory | None) -> None:
        super().__init__(machinery)
        self.directory: Directory = directory or StoreDirectory(machinery.store)
        self._changed: list[Callable[[], None]] = []

    def on_change(self, hook: Callable[[], None]) -> None:
        """Call `hook()` when approvers changed (someone new must be notified)."""
        self._changed.append(hook)

    # == who may decide ==========================================================
    async def _members(self, tenant: str, group: str) -> set[str]:
        """A group's members now, in their normal form (a directory may spell them as it likes).

        A name that is no identity (a control or invisible character, say) is
        ignored, whichever store the engine uses: nobody can be asked or decide by it.
        """
        members = set()
        for name in await self.directory.members(tenant, group):
            try:
                members.add(check_identity(name, "member"))
            except InvalidRequest:
                log.warning("group %s of tenant %s: ignoring the member %s", group, tenant, name)
        return members

    async def _member_check(
        self, tenant: str, policy: ap.Policy, known: dict[str, set[str]] | None = None
    ) -> Callable[[str], bool]:
        known = {} if known is None else known
        for g in policy.groups:
            if g not in known:
                known[g] = await self._members(tenant, g)
        members = [known[g] for g in policy.groups]
        return lambda principal: any(normal_identity(principal) in m for m in members)

    async def eligible(self, approval: ApprovalRecord) -> list[str]:
        """Everyone who may decide on `approval` now, by the directory as it is now."""
        policy = ap.Policy.from_json(approval.policy)
        members = {g: await self._members(approval.tenant, g) for g in policy.groups}
        return sorted(ap.eligible(policy, approval.started_by, members))

    async def refusal(
        self,
        approval: ApprovalRecord,
        principal: str,
        votes: Sequence[dict[str, Any]],
        known: dict[str, set[str]] | None = None,
    ) -> str | None:
        """Why `principal` may not decide on `approval` now, or None if they may.

        `known` keeps the groups' members asked already (one listing asks each once).
        """
        policy = ap.Policy.from_json(approval.policy)
        member_of = await self._member_check(approval.tenant, policy, known)
        voted = [ap.Vote(v["principal"], v["decision"]) for v in votes]

        def in_group(group: str) -> bool:
            return member_of(principal) if group in policy.groups else False

        return ap.refusal(
            policy,
            principal,
            started_by=approval.started_by,
            member_of=in_group,
            voted=voted,
        )

    # == deciding ================================================================
    @handles(ops.Decide)
    async def decide(self, req: ops.Decide, caller: Principal) -> DecisionReceipt:
        """Count the approver's decision, presented with their credential.

        Raises `InvalidCredential` (the same for every credential problem) or
        `DecisionRefused` (a valid credential, but this principal may not decide
        now, with the reason). Every refusal is counted for the audit.

        Without a credential (a principal signed in with its own key, deciding as
        itself; the door allows nothing else) the approval must be the tenant's
        (`ApprovalNotFound`), and any refusal is `DecisionRefused` with the reason.
        """
        if req.token is None:
            return await self._decide_signed_in(req, caller)
        tenant, approval_id, token = caller.tenant, req.approval_id, req.token
        principal, decision, comment, auth = req.approver, req.decision, req.comment, req.auth
        assert principal is not None  # the door names the caller when no one is given
        now = self.machinery.settings.clock()
        parts = ap.split_token(token)
        credential_id = parts[0] if parts else None
        approval = await self.store.get_approval(tenant, approval_id)
        via = authenticated_by(caller, credential_id)
        attempt = Refusal(
            tenant, approval_id, principal, decision, "", credential_id, auth, now, via
        )
        if approval is None:
            # No run of this tenant to record it in: the audit log keeps it.
            audit_log.warning(
                "refused decision on unknown approval %s in tenant %s by %s (%s)",
                approval_id,
                tenant,
                principal,
                auth,
            )
            raise InvalidCredential
        problem = await self._credential_problem(approval, parts, principal, decision)
        if problem is not None:
            await self._refused(attempt, problem)
            raise InvalidCredential
        assert credential_id is not None
        result = await self._judge(approval, attempt, credential_id, comment)
        if not result.accepted:
            await self._refused(attempt, result.reason)
            if result.principal_refused:
                raise DecisionRefused(result.reason)
            raise InvalidCredential
        return self._counted(approval, attempt, result.outcome)

    async def _decide_signed_in(self, req: ops.Decide, caller: Principal) -> DecisionReceipt:
        """A decision without a credential: the caller decides as itself, by every rule."""
        tenant, approval_id = caller.tenant, req.approval_id
        assert req.approver is not None  # the door names the caller when no one is given
        now = self.machinery.settings.clock()
        via = authenticated_by(caller, None)
        attempt = Refusal(
            tenant, approval_id, req.approver, req.decision, "", None, req.auth, now, via
        )
        approval = await self.store.get_approval(tenant, approval_id)
        if approval is None:
            audit_log.warning(
                "refused decision on unknown approval %s in tenant %s by %s (%s)",
                approval_id,
                tenant,
                req.approver,
                req.auth,
            )
            raise _not_found(approval_id, tenant)
        result = await self._judge(approval, attempt, None, req.comment)
        if not result.accepted:
            await self._refused(attempt, result.reason)
            raise DecisionRefused(result.reason)
        return self._counted(approval, attempt, result.outcome)

    async def _judge(
        self,
        approval: ApprovalRecord,
        attempt: Refusal,
        credential_id: str | None,
        comment: str,
    ) -> DecideResult:
        """The deciding transaction's verdict (asked again if the policy's groups changed)."""
        builtin = isinstance(self.directory, StoreDirectory)
        for _ in range(3):  # again only if the policy named a new group meanwhile
            policy = ap.Policy.from_json(approval.policy)
            members = None if builtin else await self._group_members(attempt.tenant, policy.groups)
            result = await self.store.decide_approval(
                DecideRequest(
                    tenant=attempt.tenant,
                    approval_id=attempt.approval_id,
                    credential_id=credential_id,
                    principal=attempt.principal,
                    decision=attempt.decision,
                    comment=comment,
                    auth=attempt.auth,
                    now=attempt.at,
                    members=members,
                    authenticated_by=attempt.authenticated_by,
                )
            )
            if not result.stale:
                break
            approval = (
                await self.store.get_approval(attempt.tenant, attempt.approval_id) or approval
            )
        return result

    def _counted(self, approval: ApprovalRecord, attempt: Refusal, outcome: str) -> DecisionReceipt:
        if outcome != ap.PENDING:
            self.machinery.wake_scheduler()
            dwell = attempt.at - approval.created_at
            self.machinery.settings.observer.approval_decided(attempt.tenant, outcome, dwell)
        return DecisionReceipt(
            attempt.approval_id, approval.run_id, attempt.principal, attempt.decision, outcome
        )

    async def _group_members(self, tenant: str, groups: Sequence[str]) -> dict[str, list[str]]:
        return {g: sorted(await self._members(tenant, g)) for g in groups}

    async def _credential_problem(
        self,
        approval: ApprovalRecord,
        parts: tuple[str, str] | None,
        principal: str,
        decision: str,
    ) -> str | None:
        """Why the presented credential does not allow this decision, or None.

        Expiry and what may change meanwhile are judged again by the deciding
        transaction. A reason never names the credential's owner or approval:
        the credential id recorded with it lets an auditor look them up.
        """
        if parts is None:
            return "malformed credential"
        credential_id, secret = parts
        cred = await self.store.get_credential(approval.tenant, credential_id)
        if cred is None:
            return "unknown credential"
        if not ap.secret_matches(secret, cred.secret_hash):
            return "forged credential: the secret does not match"
        if cred.approval_id != approval.approval_id:
            return "the credential belongs to another approval"
        if cred.action != decision:
            return f"the credential is for {cred.action}, not {decision}"
        if normal_identity(cred.approver) != normal_identity(principal):
            return "the credential was issued to another approver"
        if approval.status != ap.PENDING:
            return f"the approval is {approval.status} already"
        if cred.status != "active":
            return f"the credential was {cred.status}"
        return None

    async def _refused(self, attempt: Refusal, reason: str) -> None:
        audit_log.warning(
            "refused decision on approval %s by %s (%s, credential %s, authenticated by %s): %s",
            attempt.approval_id,
            attempt.principal,
            attempt.auth,
            attempt.credential_id,
            attempt.authenticated_by or "-",
            reason,
        )
        with contextlib.suppress(StoreError):  # the refusal stands even if the record fails
            await self.store.record_refusal(dataclasses.replace(attempt, reason=reason))

    # == the approval page ========================================================
    @handles(ops.ResolveCredential)
    async def resolve(self, req: ops.ResolveCredential, caller: Principal) -> CredentialView:
        """What an approval link's token may decide now; changes nothing.

        The token alone authenticates: its credential is found by id in any
        tenant, and its secret checked against the stored hash. Every token that
        cannot decide now (malformed, unknown, forged, used, replaced, revoked,
        expired, its approval closed, its approver no longer allowed) raises the
        one `InvalidCredential`; the reason goes to the audit log, without the secret.
        """
        parts = ap.split_token(req.token)
        if parts is None:
            audit_log.info("an approval link with a malformed token was opened")
            raise InvalidCredential
        credential_id, secret = parts
        found = await self.store.look_up_credential(credential_id)
        problem = await self._link_problem(found, secret)
        if problem is not None or found is None or found.approval is None:
            audit_log.info(
                "approval link of credential %s cannot decide: %s", credential_id, problem
            )
            raise InvalidCredential
        cred, approval = found.credential, found.approval
        return answer_of(
            CredentialView,
            approval,
            tenant=cred.tenant,
            action=cred.action,
            approver=cred.approver,
            requested_by=approval.started_by,
            decisions=[
                {
                    "approver": v["principal"],
                    "decision": v["decision"],
                    "at": moment(v["at"]),
                    "comment": v["comment"],
                }
                for v in found.votes
            ],
        )

    async def _link_problem(self, found: CredentialLookup | None, secret: str) -> str | None:
        """Why a link's credential cannot decide now, or None (the checks `decide` makes)."""
        if found is None:
            return "unknown credential"
        cred, approval = found.credential, found.approval
        if not ap.secret_matches(secret, cred.secret_hash):
            return "forged credential: the secret does not match"
        if approval is None:
            return "unknown approval"
        if approval.status != ap.PENDING:
            return f"the approval is {approval.status} already"
        clock = max(found.clock, self.machinery.settings.clock())
        expired = approval.expires_at is not None and approval.expires_at <= clock
        if found.timer_fired or expired:
            return "the approval has expired"
        if cred.status != "active":
            return f"the credential was {cred.status}"
        if cred.expires_at is not None and cred.expires_at <= clock:
            return "the credential has expired"
        return await self.refusal(approval, cred.approver, found.votes)

    # == listing =================================================================
    @handles(ops.ListApprovals)
    async def list_approvals(self, req: ops.ListApprovals, caller: Principal) -> list[ApprovalInfo]:
        """Approvals of the tenant; with an approver, only those they may decide on now.

        An approver's are looked for among the tenant's first `INBOX_SCAN`
        approvals, not just the first `limit`: those of others do not hide theirs.
        """
        principal = req.approver
        scan = req.limit if principal is None else max(req.limit, INBOX_SCAN)
        records = await self.store.list_approvals(caller.tenant, req.status, req.run_id, scan)
        known: dict[str, set[str]] = {}  # each group asked once per listing
        out: list[ApprovalInfo] = []
        for a in records:
            if len(out) >= req.limit:
                break
            if principal is not None and await self.refusal(a, principal, [], known) is not None:
                continue  # not theirs, whatever the votes: nothing more to read
            votes = await self.store.approval_votes(a.tenant, a.approval_id)
            if principal is not None and await self.refusal(a, principal, votes, known) is not None:
                continue
            refused = await self.store.approval_refusals(a.tenant, a.approval_id)
            out.append(_info(a, votes, refused))
        return out

    @handles(ops.GetApproval)
    async def get(self, req: ops.GetApproval, caller: Principal) -> ApprovalInfo:
        """One approval; `ApprovalNotFound` if the tenant has none by that id.

        A caller whose only right to read approvals is the approver role (not local, no
        operator, auditor or viewer role) reads only an approval it may decide now or has
        decided; any other answers `ApprovalNotFound`, exactly as a missing one does.
        """
        tenant, approval_id = caller.tenant, req.approval_id
        a = await self.store.get_approval(tenant, approval_id)
        if a is None:
            raise _not_found(approval_id, tenant)
        votes = await self.store.approval_votes(tenant, approval_id)
        if not caller.local and not caller.may(ops.APPROVAL_READERS):
            voted = any(caller.is_subject(v["principal"]) for v in votes)
            may_decide = (
                a.status == ap.PENDING and await self.refusal(a, caller.subject, votes) is None
            )
            if not voted and not may_decide:
                raise _not_found(approval_id, tenant)
        return _info(a, votes, await self.store.approval_refusals(tenant, approval_id))

    # == changing approvers ========================================================
    @handles(ops.Revoke)
    async def revoke(self, req: ops.Revoke, caller: Principal) -> None:
        """Take an approver off a pending approval: their credentials die at once."""
        assert req.by is not None  # the door names the caller when no one is given
        await self._change(
            req.approval_id, caller.tenant, req.by, req.reason, revoke=req.approver, add=None
        )

    @handles(ops.Reassign)
    async def reassign(self, req: ops.Reassign, caller: Principal) -> None:
        """Replace an approver: the old one's credentials die, the new one is notified."""
        assert req.by is not None
        await self._change(
            req.approval_id,
            caller.tenant,
            req.by,
            req.reason,
            revoke=req.from_approver,
            add=req.to_approver,
        )

    # == the built-in directory ====================================================
    @handles(ops.AddToGroup)
    async def add_to_group(self, req: ops.AddToGroup, caller: Principal) -> int:
        """Add members to a group; how many were new.

        New members are asked (with fresh credentials) on the pending approvals
        that name the group, in the same transaction.
        """
        now = self.machinery.settings.clock()
        added = await self.store.add_group_members(caller.tenant, req.group, req.members, now)
        if added:
            for hook in self._changed:
                hook()
        return added

    @handles(ops.RemoveFromGroup)
    async def remove_from_group(self, req: ops.RemoveFromGroup, caller: Principal) -> int:
        """Remove members from a group; how many were members.

        Their active credentials on the pending approvals that name the group
        die in the same transaction (unless the policy still allows them
        otherwise: a listed user, or a member of another of its groups).
        """
        now = self.machinery.settings.clock()
        return await self.store.remove_group_members(caller.tenant, req.group, req.members, now)

    @handles(ops.ListGroups)
    async def groups(self, req: ops.ListGroups, caller: Principal) -> dict[str, list[str]]:
        """The tenant's groups and their members."""
        return await self.store.list_groups(caller.tenant)

    async def _change(
        self,
        approval_id: str,
        tenant: str,
        by: str,
        reason: str,
        *,
        revoke: str | None,
        add: str | None,
    ) -> None:
        approval = await self.store.get_approval(tenant, approval_id)
        if approval is None:
            raise _not_found(approval_id, tenant)
        if approval.status != ap.PENDING:
            raise DecisionRefused(f"the approval is {approval.status} already")
        now = self.machinery.settings.clock()
        changed = await self.store.change_approvers(
            ApproverChange(tenant, approval_id, revoke, add, by, reason, now)
        )
        if not changed:
            raise DecisionRefused("the approval is no longer pending")
        for hook in self._changed:
            hook()


def authenticated_by(caller: Principal, credential_id: str | None) -> str:
    """The credential that authenticated a decision's caller, as the vote records it: the
    caller's API key or console account, else the approval link's credential (the page),
    else the local principal (the embedded API, the command line)."""
    if caller.credential:
        return caller.credential
    if credential_id is not None:
        return f"link:{credential_id}"
    if caller.local:
        return f"local:{caller.subject}"
    return ""


def _not_found(approval_id: str, tenant: str) -> ApprovalNotFound:
    return ApprovalNotFound(f"no approval {preview(approval_id)} in tenant {preview(tenant)}")


def _info(
    a: ApprovalRecord, votes: list[dict[str, Any]], refusals: list[dict[str, Any]]
) -> ApprovalInfo:
    return answer_of(ApprovalInfo, a, votes=votes, refusals=refusals)
