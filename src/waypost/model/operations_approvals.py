"""Approvals as requests: list, read, decide, revoke, reassign; approver groups."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, TypeVar

from waypost.errors import InvalidRequest, PermissionDenied
from waypost.model.identity import (
    Principal,
    Role,
    check_identity,
    preview,
)
from waypost.model.requests import (
    APPROVAL_READERS,
    GROUPS_ONLY,
    REMOTE_LATER,
    TOKENLESS_AUTH,
    Check,
    Cli,
    Http,
    NotOffered,
    Request,
    checked,
)

T = TypeVar("T")


# == approvals =========================================================================
@dataclass(frozen=True)
class ApprovalRequest(Request[T]):
    """A request about one approval of the caller's tenant, named by its first field."""

    approval_id: str = checked(Check.ID, what="approval_id")


@dataclass(frozen=True)
class ListApprovals(Request[Any]):
    """Approvals (`list[ApprovalInfo]`); with `approver`, those they may decide now."""

    roles = frozenset({Role.APPROVER, Role.OPERATOR, Role.AUDITOR, Role.VIEWER})
    name = "list approvals"
    call = "approvals"
    remote = REMOTE_LATER
    http = Http("GET", "/v1/approvals", tag="approvals")
    cli = Cli("approvals list")
    approver: str | None = checked(Check.OPTIONAL_IDENTITY, what="principal", default=None)
    status: str | None = checked(Check.OPTIONAL_ID, what="status", default="pending")
    run_id: str | None = checked(Check.OPTIONAL_ID, what="run_id", default=None)
    limit: int = checked(Check.LIMIT, default=100)

    def checked(self, principal: Principal) -> Request[Any]:
        done = super().checked(principal)
        assert isinstance(done, ListApprovals)
        if principal.local or principal.may(APPROVAL_READERS):
            return done
        # An approver and nothing more (an API key's inbox): the approvals it may
        # decide now, and no one else's.
        if done.approver is not None and not principal.is_subject(done.approver):
            raise PermissionDenied(
                f"an approver lists its own approvals ({preview(principal.subject)}), "
                f"not {preview(done.approver)}'s"
            )
        if done.status not in (None, "pending"):
            raise PermissionDenied(
                f"an approver lists the approvals it may decide now (pending), "
                f"not {preview(done.status)} ones"
            )
        return dataclasses.replace(
            done, approver=check_identity(principal.subject, "principal"), status="pending"
        )


@dataclass(frozen=True)
class GetApproval(ApprovalRequest[Any]):
    """One approval (`ApprovalInfo`)."""

    roles = frozenset({Role.APPROVER, Role.OPERATOR, Role.AUDITOR, Role.VIEWER})
    name = "approval"
    call = "approval"
    remote = REMOTE_LATER
    http = Http("GET", "/v1/approvals/{approval_id:id}", tag="approvals")
    cli = Cli("approvals show")


@dataclass(frozen=True, kw_only=True)
class Decide(Request[Any]):
    """Approve or reject (`DecisionReceipt`), with a credential or as an approver signed in.

    With `token` (an approval link's credential) the decision is the credential's.
    Without one, a principal that is not local (authenticated by an API key)
    decides as itself, under every rule a credential's decision obeys; the embedded
    API and the CLI always present the approver's credential.
    """

    roles = frozenset({Role.APPROVER})
    name = "decide"
    call = "decide"
    remote = REMOTE_LATER
    http = Http("POST", "/v1/approvals/{approval_id:id}/decision", tag="approvals")
    cli = Cli("approve")
    approval_id: str = checked(Check.ID, what="approval_id")
    token: str | None = checked(Check.OPTIONAL_TOKEN, default=None)
    approver: str | None = checked(Check.ON_BEHALF, what="principal", default=None)
    decision: str = checked(Check.ID, what="decision")
    comment: str = checked(Check.COMMENT, default="")
    auth: str = checked(Check.ID, what="auth", default="api")

    def checked(self, principal: Principal) -> Request[Any]:
        if self.decision not in ("approve", "reject"):
            raise InvalidRequest(
                f"decision must be 'approve' or 'reject', not {preview(self.decision)}",
                field="decision",
            )
        if self.token is None and principal.local:
            raise InvalidRequest(
                "a decision by the embedded API or the CLI needs the approver's credential "
                "(the token of their approval link)",
                field="token",
            )
        done = super().checked(principal)
        if getattr(done, "approver", None) is None:
            raise InvalidRequest("a decision needs the principal who makes it", field="principal")
        if self.token is None:
            # Authenticated by the caller's own key or session, and recorded as such.
            via = principal.auth or TOKENLESS_AUTH
            return dataclasses.replace(done, auth=via)  # type: ignore[type-var]
        return done


@dataclass(frozen=True)
class Revoke(ApprovalRequest[None]):
    """Take an approver off a pending approval; their credentials stop working."""

    roles = frozenset({Role.OPERATOR})
    name = "revoke"
    call = "revoke"
    http = cli = NotOffered("revoking an approval link is an operator's call from the embedded API")
    approver: str = checked(Check.IDENTITY, what="principal")
    by: str | None = checked(Check.ACTOR, what="by", default=None)
    reason: str = checked(Check.REASON, what="reason", default="")


@dataclass(frozen=True)
class Reassign(ApprovalRequest[None]):
    """Replace an approver of a pending approval; the new one is notified."""

    roles = frozenset({Role.OPERATOR})
    name = "reassign"
    call = "reassign"
    http = cli = NotOffered("reassigning an approval is an operator's call from the embedded API")
    from_approver: str = checked(Check.IDENTITY, what="from_principal")
    to_approver: str = checked(Check.IDENTITY, what="to_principal")
    by: str | None = checked(Check.ACTOR, what="by", default=None)
    reason: str = checked(Check.REASON, what="reason", default="")


@dataclass(frozen=True)
class GroupChange(Request[int]):
    """A change of the members of a group of the built-in directory (admin only); answers
    how many members it changed."""

    roles = frozenset({Role.ADMIN})
    http = GROUPS_ONLY
    group: str = checked(Check.ID, what="group")
    members: list[str] = checked(Check.IDENTITIES, what="principal")


@dataclass(frozen=True)
class AddToGroup(GroupChange):
    """Add members to a group of the built-in directory; answers how many were new."""

    name = "add to group"
    call = "add_to_group"
    cli = Cli("groups add")


@dataclass(frozen=True)
class RemoveFromGroup(GroupChange):
    """Remove members from a group of the built-in directory; answers how many were."""

    name = "remove from group"
    call = "remove_from_group"
    cli = Cli("groups remove")


@dataclass(frozen=True)
class ListGroups(Request[dict[str, list[str]]]):
    """The built-in directory's groups and their members."""

    roles = frozenset({Role.OPERATOR, Role.AUDITOR, Role.VIEWER})
    name = "groups"
    call = "groups"
    http = GROUPS_ONLY
    cli = Cli("groups list")
