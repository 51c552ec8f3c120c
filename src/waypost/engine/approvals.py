"""Human approval, the engine part: deciding, listing, changing approvers, notifying.

Workflow code asks with `ctx.approval(...)`; its commit stores the approval and
puts a message in the outbox (same transaction). The outbox dispatcher works
out who is asked (groups are resolved through the directory then), makes each
approver's credentials — only their hashes are stored — and hands the
notification to the sender after commit, retrying until it is delivered;
notification ids are stable, so receivers deduplicate.

`decide` checks a credential and the principal presenting it, then consumes
the credential and counts the vote in one conditional transaction; every
attempt, accepted or refused, lands in the run's history with who, how they
authenticated, which credential and why.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlencode

from waypost.errors import ConfigurationError, StoreError, WaypostError
from waypost.model import approvals as ap
from waypost.model.events import EventType, NewEvent
from waypost.store.base import (
    ApprovalRecord,
    DecideRequest,
    NewCredential,
    OutboxItem,
    RunCommit,
    Store,
)

from .senders import LogSender, Notification, Sender

if TYPE_CHECKING:
    from .core import AsyncEngine

log = logging.getLogger("waypost.approvals")
audit_log = logging.getLogger("waypost.audit")

_E = EventType
_MAX_SEND_ATTEMPTS = 12


class InvalidCredential(WaypostError):
    """The credential is not valid for this decision (the same answer whatever the cause)."""

    def __init__(self) -> None:
        super().__init__(
            "the approval credential is not valid: it is unknown, used, expired, revoked, or "
            "not for this approval, action or approver"
        )


class DecisionRefused(WaypostError):
    """The credential is valid but this principal may not decide now (the reason says why)."""


class Directory(Protocol):
    """Who is in a group, asked at the moment it matters (never cached by the engine)."""

    async def members(self, tenant: str, group: str) -> list[str]: ...


class StoreDirectory:
    """The built-in directory: groups kept in the engine's database."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def members(self, tenant: str, group: str) -> list[str]:
        return await self.store.group_members(tenant, group)


@dataclass(frozen=True)
class ApprovalInfo:
    """An approval as the API shows it."""

    approval_id: str
    tenant: str
    run_id: str
    step: str
    name: str
    status: str
    policy: dict[str, Any]
    started_by: str | None
    data: Any
    expires_at: datetime | None
    created_at: datetime
    votes: list[dict[str, Any]]


@dataclass(frozen=True)
class DecisionReceipt:
    """What a counted decision did: `outcome` is pending (more votes needed) or final."""

    approval_id: str
    run_id: str
    principal: str
    decision: str
    outcome: str


def approval_links(base_url: str, tenant: str, approval_id: str, token: str) -> dict[str, str]:
    """The approve and reject links: each opens a confirmation page that POSTs the token."""
    base = base_url.rstrip("/")
    return {
        action: f"{base}/{approval_id}?"
        + urlencode({"tenant": tenant, "action": action, "token": token})
        for action in ap.ACTIONS
    }


class Approvals:
    """The approval commands of one engine, and its outbox dispatcher."""

    def __init__(
        self,
        engine: AsyncEngine,
        directory: Directory | None,
        notifier: Sender | None,
        base_url: str,
    ) -> None:
        self.engine = engine
        self.directory: Directory = directory or StoreDirectory(engine.store)
        self.notifier: Sender = notifier or LogSender()
        self.base_url = base_url
        self.wake = asyncio.Event()

    @property
    def store(self) -> Store:
        return self.engine.store

    # == who may decide ==========================================================
    async def _member_check(self, tenant: str, policy: ap.Policy) -> Callable[[str], bool]:
        members = {g: set(await self.directory.members(tenant, g)) for g in policy.groups}
        return lambda principal: any(principal in m for m in members.values())

    async def eligible(self, approval: ApprovalRecord) -> list[str]:
        """Everyone who may decide on `approval` now, by the directory as it is now."""
        policy = ap.Policy.from_json(approval.policy)
        names = set(policy.users)
        for group in policy.groups:
            names.update(await self.directory.members(approval.tenant, group))
        names.difference_update(policy.excluded)
        if policy.segregation_of_duties and approval.started_by is not None:
            names.discard(approval.started_by)
        return sorted(names)

    async def _refusal(
        self, approval: ApprovalRecord, principal: str, votes: Sequence[dict[str, Any]]
    ) -> str | None:
        policy = ap.Policy.from_json(approval.policy)
        member_of = await self._member_check(approval.tenant, policy)
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
    async def decide(
        self,
        approval_id: str,
        token: Any,
        principal: str,
        decision: str,
        comment: str = "",
        *,
        tenant: str = "default",
        auth: str = "api",
    ) -> DecisionReceipt:
        """Count `principal`'s decision, presented with their credential `token`.

        Raises `InvalidCredential` (the same for every credential problem) or
        `DecisionRefused` (a valid credential, but this principal may not decide
        now, with the reason). Every attempt is recorded in the run's history.
        """
        if decision not in ap.ACTIONS:
            raise ConfigurationError(f"decision must be 'approve' or 'reject', not {decision!r}")
        if not isinstance(principal, str) or not principal:
            raise ConfigurationError("a decision needs the principal who makes it")
        comment = str(comment or "")[:4000]
        engine = self.engine
        now = engine.clock()
        parts = ap.split_token(token)
        credential_id = parts[0] if parts else None
        approval = await self.store.get_approval(tenant, approval_id)
        attempt = {
            "approval_id": approval_id,
            "principal": principal,
            "decision": decision,
            "auth": auth,
            "credential_id": credential_id,
        }
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
        reason = await self._credential_problem(approval, parts, principal, decision, now)
        if reason is not None:
            await self._refused(approval, attempt, reason, now)
            raise InvalidCredential
        votes = await self.store.approval_votes(tenant, approval_id)
        why_not = await self._refusal(approval, principal, votes)
        if why_not is not None:
            # A concurrent decision may have spent this credential since it was read
            # (a double click): a credential that no longer works gets the one answer
            # every credential problem gets.
            spent = await self._credential_problem(approval, parts, principal, decision, now)
            await self._refused(approval, attempt, spent or why_not, now)
            if spent is not None:
                raise InvalidCredential
            raise DecisionRefused(why_not)
        policy = ap.Policy.from_json(approval.policy)
        eligible = None if policy.veto else len(await self.eligible(approval))
        assert credential_id is not None
        result = await self.store.decide_approval(
            DecideRequest(
                tenant=tenant,
                approval_id=approval_id,
                credential_id=credential_id,
                principal=principal,
                decision=decision,
                comment=comment,
                auth=auth,
                now=now,
                eligible=eligible,
            )
        )
        if not result.accepted:
            await self._refused(approval, attempt, result.reason, now)
            if "decided on this approval already" in result.reason:
                raise DecisionRefused(result.reason)
            raise InvalidCredential
        if result.outcome != ap.PENDING:
            engine.scheduler.wake()
        return DecisionReceipt(approval_id, approval.run_id, principal, decision, result.outcome)

    async def _credential_problem(
        self,
        approval: ApprovalRecord,
        parts: tuple[str, str] | None,
        principal: str,
        decision: str,
        now: float,
    ) -> str | None:
        """Why the presented credential does not allow this decision, or None."""
        if parts is None:
            return "malformed credential"
        credential_id, secret = parts
        cred = await self.store.get_credential(approval.tenant, credential_id)
        if cred is None:
            return "unknown credential"
        if not ap.secret_matches(secret, cred.secret_hash):
            return "forged credential: the secret does not match"
        if cred.approval_id != approval.approval_id:
            return f"the credential belongs to another approval ({cred.approval_id})"
        if cred.action != decision:
            return f"the credential is for {cred.action}, not {decision}"
        if cred.approver != principal:
            return f"the credential was issued to another approver ({cred.approver})"
        if approval.status != ap.PENDING:
            return f"the approval is {approval.status} already"
        if cred.status != "active":
            return f"the credential was {cred.status}"
        if cred.expires_at is not None and cred.expires_at <= now:
            return "the credential has expired"
        return None

    async def _refused(
        self, approval: ApprovalRecord, attempt: dict[str, Any], reason: str, now: float
    ) -> None:
        audit_log.warning(
            "refused decision on approval %s by %s: %s",
            approval.approval_id,
            attempt["principal"],
            reason,
        )
        data = {**attempt, "step": approval.step, "reason": reason}
        with contextlib.suppress(StoreError):  # the refusal stands even if the record fails
            await self.engine._commit(
                RunCommit(
                    tenant=approval.tenant,
                    run_id=approval.run_id,
                    events=[NewEvent(_E.APPROVAL_REFUSED, data, now)],
                    now=now,
                )
            )

    # == listing =================================================================
    async def list(
        self,
        principal: str | None = None,
        status: str | None = ap.PENDING,
        *,
        tenant: str = "default",
        run_id: str | None = None,
        limit: int = 100,
    ) -> list[ApprovalInfo]:
        """Approvals of `tenant`; with `principal`, only those they may decide on now."""
        records = await self.store.list_approvals(tenant, status, run_id, limit)
        out = []
        for a in records:
            votes = await self.store.approval_votes(a.tenant, a.approval_id)
            if principal is not None and await self._refusal(a, principal, votes) is not None:
                continue
            out.append(_info(a, votes))
        return out

    async def get(self, approval_id: str, *, tenant: str = "default") -> ApprovalInfo | None:
        a = await self.store.get_approval(tenant, approval_id)
        if a is None:
            return None
        return _info(a, await self.store.approval_votes(tenant, approval_id))

    # == changing approvers ========================================================
    async def revoke(
        self, approval_id: str, principal: str, *, by: str, reason: str, tenant: str = "default"
    ) -> None:
        """Take `principal` off a pending approval: their credentials die at once."""
        await self._change(approval_id, tenant, by, reason, revoke=principal, add=None)

    async def reassign(
        self,
        approval_id: str,
        from_principal: str,
        to_principal: str,
        *,
        by: str,
        reason: str,
        tenant: str = "default",
    ) -> None:
        """Replace an approver: the old one's credentials die, the new one is notified."""
        await self._change(approval_id, tenant, by, reason, revoke=from_principal, add=to_principal)

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
        if not reason or not by:
            raise ConfigurationError("changing approvers needs who does it (by) and a reason")
        approval = await self.store.get_approval(tenant, approval_id)
        if approval is None:
            raise LookupError(f"no approval {approval_id!r} in tenant {tenant!r}")
        if approval.status != ap.PENDING:
            raise DecisionRefused(f"the approval is {approval.status} already")
        policy = ap.Policy.from_json(approval.policy)
        if revoke is not None:
            policy = policy.without(revoke)
        if add is not None:
            policy = policy.adding(add)
        now = self.engine.clock()
        event = NewEvent(
            _E.APPROVERS_CHANGED,
            {
                "step": approval.step,
                "approval_id": approval_id,
                "revoked": revoke,
                "added": add,
                "by": by,
                "reason": reason,
                "policy": policy.to_json(),
            },
            now,
        )
        changed = await self.store.change_approvers(
            tenant, approval_id, policy.to_json(), revoke, add, event, now
        )
        if not changed:
            raise DecisionRefused("the approval is no longer pending")
        self.wake.set()

    # == the outbox ================================================================
    async def dispatch_forever(self, poll_interval: float) -> None:
        """Deliver outbox messages: claimed with a lease, so any engine may send them."""
        engine = self.engine
        while True:
            self.wake.clear()
            try:
                # A message whose sender outlives the lease may be sent twice; its
                # stable id lets the receiver drop the copy.
                items = await self.store.claim_outbox(
                    engine.owner, engine.clock(), 32, 2 * engine.lease
                )
            except StoreError as exc:
                log.warning("claiming notifications failed (will retry): %s", exc)
                items = []
            for item in items:
                await self._deliver(item)
            if not items:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(poll_interval):  # not wait_for: see Scheduler._sleep
                        await self.wake.wait()

    async def _deliver(self, item: OutboxItem) -> None:
        engine = self.engine
        try:
            if item.kind == "approval.requested":
                await self._fan_out(item)
            elif item.kind == "approval.notify":
                await self._notify(item)
            else:
                raise ConfigurationError(f"unknown outbox message kind {item.kind!r}")
        except StoreError as exc:
            log.warning("notification %s put off by a database error: %s", item.id, exc)
            return  # its lease lapses and it is tried again
        except Exception as exc:
            retry = item.attempts < _MAX_SEND_ATTEMPTS
            delay = min(300.0, 2.0**item.attempts)
            log.log(
                logging.WARNING if retry else logging.ERROR,
                "sending notification %s failed (attempt %d%s): %s",
                item.id,
                item.attempts,
                f", retry in {delay:.0f}s" if retry else ", giving up",
                exc,
            )
            with contextlib.suppress(StoreError):
                now = engine.clock()
                await self.store.finish_outbox(
                    item.id, engine.owner, now, repr(exc), now + delay if retry else None
                )
            return
        with contextlib.suppress(StoreError):
            await self.store.finish_outbox(item.id, engine.owner, engine.clock(), None, None)

    async def _fan_out(self, item: OutboxItem) -> None:
        """One approval asked for: one message per approver, resolved now."""
        approval = await self.store.get_approval(item.tenant, item.payload["approval_id"])
        if approval is None or approval.status != ap.PENDING:
            return
        approvers = await self.eligible(approval)
        if not approvers:
            log.warning(
                "approval %s (%s) of run %s has nobody to ask: the policy names no one who "
                "may decide (check its groups)",
                approval.approval_id,
                approval.name,
                approval.run_id,
            )
        await self.store.add_outbox(
            [
                OutboxItem(
                    id=f"{approval.approval_id}:notify:{who}",
                    tenant=approval.tenant,
                    kind="approval.notify",
                    payload={"approval_id": approval.approval_id, "approver": who},
                    attempts=0,
                )
                for who in approvers
            ],
            self.engine.clock(),
        )
        self.wake.set()

    async def _notify(self, item: OutboxItem) -> None:
        tenant = item.tenant
        approver = str(item.payload["approver"])
        approval = await self.store.get_approval(tenant, item.payload["approval_id"])
        if approval is None or approval.status != ap.PENDING:
            return
        if await self._refusal(approval, approver, []) is not None:
            return  # removed meanwhile: nothing to send
        tokens: dict[str, str] = {}
        creds = []
        for action in ap.ACTIONS:
            issued = ap.issue_credential()
            tokens[action] = issued.token
            creds.append(NewCredential(issued.credential_id, action, issued.secret_hash))
        now = self.engine.clock()
        current = await self.store.issue_credentials(
            tenant, approval.approval_id, approver, creds, now
        )
        if current is None:
            return
        links = {
            action: approval_links(self.base_url, tenant, approval.approval_id, tokens[action])[
                action
            ]
            for action in ap.ACTIONS
        }
        notification = Notification(
            id=item.id,
            kind="approval.requested",
            tenant=tenant,
            approval_id=approval.approval_id,
            run_id=approval.run_id,
            step=approval.step,
            name=approval.name,
            approver=approver,
            expires_at=approval.expires_at,
            approve_token=tokens[ap.APPROVE],
            reject_token=tokens[ap.REJECT],
            approve_url=links[ap.APPROVE],
            reject_url=links[ap.REJECT],
            data=approval.data,
        )
        await asyncio.to_thread(self.notifier.send, notification)


def _info(a: ApprovalRecord, votes: list[dict[str, Any]]) -> ApprovalInfo:
    def dt(ts: float | None) -> datetime | None:
        return None if ts is None else datetime.fromtimestamp(ts, UTC)

    created = dt(a.created_at)
    assert created is not None
    return ApprovalInfo(
        approval_id=a.approval_id,
        tenant=a.tenant,
        run_id=a.run_id,
        step=a.step,
        name=a.name,
        status=a.status,
        policy=a.policy,
        started_by=a.started_by,
        data=a.data,
        expires_at=dt(a.expires_at),
        created_at=created,
        votes=votes,
    )
