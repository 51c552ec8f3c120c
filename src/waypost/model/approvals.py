"""Human approval, the pure part: who may decide, when a decision is reached, credentials.

A policy names its approvers (users and/or groups) and how many distinct
approvals it needs: `AnyOf` one, `Quorum` N, `AllOf` every listed user (by
name: votes of others never stand in for one of them). A reject ends the
approval at once when `veto` is on (the default); with it off, the approval is
rejected once it has a rejection and the approvals so far plus the approvers
who may still vote (allowed now, not yet voted) fall short of the count. A vote
once counted stays counted, whoever leaves the group afterwards. Segregation
of duties (on by default) keeps the principal who started the run from deciding;
when nobody knows who started it (a run stored before every start recorded its
starter, or a child of such a run), it fails closed: nobody may decide, unless the
policy says so explicitly (`allow_unknown_starter`, recorded with the policy in the
run's history).

Escalation (`Policy.escalated`) lets another group decide too and never asks
for fewer approvals: `AnyOf` and `Quorum` count the group's members among
their approvers; `AllOf` still needs every listed user, and the group's
members may decide in addition (an approval of theirs is recorded, a reject
rejects).

Credentials are `<id>.<secret>`: the id finds the stored row, the secret (256
bits from `secrets`) is checked against its stored SHA-256 with
`hmac.compare_digest`. Only the hash is ever stored.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import re
import secrets
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from waypost.errors import ConfigurationError, InvalidRequest
from waypost.model.identity import check_id, normal_identity

APPROVE = "approve"
REJECT = "reject"
ACTIONS = (APPROVE, REJECT)

PENDING = "pending"
APPROVED = "approved"
REJECTED = "rejected"
EXPIRED = "expired"
CANCELLED = "cancelled"
REVOKED = "revoked"  # withdrawn while pending: its run moved to another definition version
CLOSED_STATUSES = frozenset({APPROVED, REJECTED, EXPIRED, CANCELLED, REVOKED})

# Refused decisions kept one by one per approval (each also one `ApprovalRefused` event
# in the run's history); refusals beyond them are only counted.
REFUSALS_KEPT = 32


@dataclass(frozen=True)
class Policy:
    """Who may approve and how many distinct approvals are needed.

    Use `AnyOf`, `Quorum` or `AllOf` to build one. In an "all" policy, `users`
    are the people who must each approve and `groups` (only ever added by an
    escalation) those whose members may decide in addition.
    """

    kind: str
    users: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    count: int = 1
    veto: bool = True
    segregation_of_duties: bool = True
    excluded: tuple[str, ...] = ()  # approvers revoked from this approval
    # With segregation of duties, a run whose starter is unknown can be decided by nobody;
    # True lets its approvers decide as if the starter were nobody among them.
    allow_unknown_starter: bool = False

    def __post_init__(self) -> None:
        if self.kind not in ("any", "quorum", "all"):
            raise ConfigurationError(f"unknown approval policy kind {self.kind!r}")
        if not self.users and not self.groups:
            raise ConfigurationError("an approval policy needs at least one user or group")
        if self.count < 1:
            raise ConfigurationError(f"an approval needs at least 1 approver, not {self.count}")
        only_users = self.users and not self.groups
        if self.kind == "quorum" and only_users and self.count > len(self.users):
            raise ConfigurationError(
                f"a quorum of {self.count} cannot be reached by {len(self.users)} listed users"
            )
        for name in (*self.users, *self.groups, *self.excluded):
            if not isinstance(name, str) or not name or len(name) > 200:
                raise ConfigurationError(f"approver and group names are short strings: {name!r}")
            try:
                check_id(name, "approver or group name")
            except InvalidRequest as exc:
                raise ConfigurationError(str(exc)) from None
        # People are compared in one normal form ("Ann" and "ann" are one approver).
        object.__setattr__(self, "users", tuple(dict.fromkeys(map(normal_identity, self.users))))
        object.__setattr__(self, "excluded", tuple(map(normal_identity, self.excluded)))

    @property
    def needed(self) -> int:
        return len(self.users) if self.kind == "all" else self.count

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": self.kind,
            "users": list(self.users),
            "groups": list(self.groups),
            "count": self.count,
            "veto": self.veto,
            "segregation_of_duties": self.segregation_of_duties,
            "excluded": list(self.excluded),
        }
        if self.allow_unknown_starter:  # written only when set: policies stored before read alike
            out["allow_unknown_starter"] = True
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Policy:
        return cls(
            kind=str(data["kind"]),
            users=tuple(data.get("users", ())),
            groups=tuple(data.get("groups", ())),
            count=int(data.get("count", 1)),
            veto=bool(data.get("veto", True)),
            segregation_of_duties=bool(data.get("segregation_of_duties", True)),
            excluded=tuple(data.get("excluded", ())),
            allow_unknown_starter=data.get("allow_unknown_starter") is True,
        )

    def without(self, principal: str) -> Policy:
        """This policy with `principal` no longer allowed (revoked)."""
        users = tuple(u for u in self.users if u != principal)
        excluded = self.excluded if principal in self.excluded else (*self.excluded, principal)
        if self.kind == "all":
            # Removing one of "all of" changes what is needed; keep the others.
            return dataclasses.replace(self, users=users or self.users, excluded=excluded)
        return dataclasses.replace(self, excluded=excluded)

    def adding(self, principal: str) -> Policy:
        """This policy with `principal` allowed as a named approver (reassignment)."""
        users = self.users if principal in self.users else (*self.users, principal)
        excluded = tuple(e for e in self.excluded if e != principal)
        return dataclasses.replace(self, users=users, excluded=excluded)

    def escalated(self, group: str) -> Policy:
        """This policy with `group`'s members allowed to decide too; never fewer approvals.

        `AnyOf` and `Quorum` count the group's members among their approvers
        (the count is unchanged). `AllOf` still needs each listed user: the
        group's members may decide in addition, and a reject of theirs
        rejects, but their approval never stands in for a listed user (an
        operator who wants that reassigns the user's place).
        """
        if group in self.groups:
            return self
        return dataclasses.replace(self, groups=(*self.groups, group))


def AnyOf(
    users: Iterable[str] = (),
    groups: Iterable[str] = (),
    *,
    group: str | None = None,
    segregation_of_duties: bool = True,
    allow_unknown_starter: bool = False,
) -> Policy:
    """One approval from any listed user or any member of a listed group."""
    return _among(
        "any", users, groups, group, 1, True, segregation_of_duties, allow_unknown_starter
    )


def Quorum(
    count: int,
    *,
    group: str | None = None,
    groups: Iterable[str] = (),
    users: Iterable[str] = (),
    veto: bool = True,
    segregation_of_duties: bool = True,
    allow_unknown_starter: bool = False,
) -> Policy:
    """`count` approvals from distinct approvers among the users and groups named."""
    return _among(
        "quorum", users, groups, group, count, veto, segregation_of_duties, allow_unknown_starter
    )


def _among(
    kind: str,
    users: Iterable[str],
    groups: Iterable[str],
    group: str | None,
    count: int,
    veto: bool,
    segregation_of_duties: bool,
    allow_unknown_starter: bool,
) -> Policy:
    """A policy of `kind` over the users and groups named (`group`: one more group)."""
    return Policy(
        kind,
        tuple(users),
        (*groups, *([group] if group else [])),
        count,
        veto,
        segregation_of_duties,
        allow_unknown_starter=allow_unknown_starter,
    )


def AllOf(
    users: Iterable[str],
    *,
    segregation_of_duties: bool = True,
    allow_unknown_starter: bool = False,
) -> Policy:
    """An approval from every listed user; any reject ends it rejected."""
    listed = tuple(users)
    return Policy(
        "all",
        listed,
        (),
        max(1, len(listed)),
        True,
        segregation_of_duties,
        allow_unknown_starter=allow_unknown_starter,
    )


def as_policy(approvers: Any) -> Policy:
    """Accept a Policy, a user name, or a list of user names (any one of them)."""
    if isinstance(approvers, Policy):
        return approvers
    if isinstance(approvers, str):
        return AnyOf(users=[approvers])
    if isinstance(approvers, Sequence) and all(isinstance(a, str) for a in approvers):
        return AnyOf(users=list(approvers))
    raise ConfigurationError(
        f"approvers must be wp.AnyOf(...), wp.Quorum(...), wp.AllOf(...), a user name or a "
        f"list of user names, not {approvers!r}"
    )


# == deciding ===================================================================
@dataclass(frozen=True)
class Vote:
    principal: str
    decision: str
    comment: str = ""
    at: float = 0.0


UNKNOWN_STARTER = (
    "nobody knows who started this run, so nobody may decide its approval: the starter "
    "may not approve it (segregation of duties), and anyone could be the starter"
)


def starter_unknown(policy: Policy, started_by: str | None) -> bool:
    """Whether segregation of duties fails closed: it is on, nobody knows who started the
    run, and the policy does not say explicitly that an unknown starter is allowed."""
    return policy.segregation_of_duties and not started_by and not policy.allow_unknown_starter


def refusal(
    policy: Policy,
    principal: str,
    *,
    started_by: str | None,
    member_of: Callable[[str], bool],
    voted: Iterable[Vote],
) -> str | None:
    """Why `principal` may not decide now, or None if they may.

    `member_of(group)` asks the directory now: membership is re-checked at the
    moment of deciding, never taken from when the approval was created. People
    are compared in their normal form (`model.identity`).
    """
    principal = normal_identity(principal)
    if started_by is not None:
        started_by = normal_identity(started_by)
    if principal in policy.excluded:
        return f"{principal} was removed from this approval's approvers"
    if starter_unknown(policy, started_by):
        return UNKNOWN_STARTER
    if policy.segregation_of_duties and started_by is not None and principal == started_by:
        return f"{principal} started this run and may not approve it (segregation of duties)"
    if any(normal_identity(v.principal) == principal for v in voted):
        return f"{principal} has decided on this approval already"
    if principal in policy.users:
        return None
    if any(member_of(g) for g in policy.groups):
        return None
    return f"{principal} is not among the approvers"


def eligible(
    policy: Policy, started_by: str | None, members: Mapping[str, Iterable[str]]
) -> set[str]:
    """Everyone who may decide under `policy`, given each group's `members` (normal form).

    The same rule as `refusal` (before anyone voted): the listed users and the
    groups' members, less those revoked and, with segregation of duties, the
    principal who started the run (nobody at all when nobody knows who did).
    """
    names = set(policy.users)
    for group in policy.groups:
        names.update(normal_identity(m) for m in members.get(group, ()))
    names.difference_update(policy.excluded)
    if starter_unknown(policy, started_by):
        return set()
    if policy.segregation_of_duties and started_by is not None:
        names.discard(normal_identity(started_by))
    return names


def tally(policy: Policy, votes: Sequence[Vote], remaining: int | None = None) -> str:
    """PENDING, APPROVED or REJECTED, from the distinct approvers' votes so far.

    `remaining` is how many approvers may still vote (allowed now and not yet
    voted); a policy without veto is rejected once it has a rejection and the
    approvals plus `remaining` fall short of the count. Unknown (None) means
    only a veto or the count decides. An "all" policy is approved when each
    listed user approved, and rejected by any reject.
    """
    approvals = {normal_identity(v.principal) for v in votes if v.decision == APPROVE}
    rejections = {normal_identity(v.principal) for v in votes if v.decision == REJECT}
    if policy.kind == "all":
        if rejections:
            return REJECTED
        return APPROVED if set(policy.users) <= approvals else PENDING
    if rejections and policy.veto:
        return REJECTED
    if len(approvals) >= policy.count:
        return APPROVED
    if rejections and remaining is not None and len(approvals) + remaining < policy.count:
        return REJECTED
    return PENDING


@dataclass(frozen=True)
class Decision:
    """How an approval ended, as the workflow sees it."""

    outcome: str  # approved, rejected, expired
    approval_id: str
    votes: tuple[Vote, ...] = field(default_factory=tuple)

    @property
    def approved(self) -> bool:
        return self.outcome == APPROVED

    @property
    def expired(self) -> bool:
        return self.outcome == EXPIRED

    @property
    def decided_by(self) -> list[str]:
        return [v.principal for v in self.votes]

    @property
    def comments(self) -> dict[str, str]:
        return {v.principal: v.comment for v in self.votes if v.comment}


# == credentials ================================================================
@dataclass(frozen=True)
class IssuedCredential:
    """A new credential: the token goes to the approver, only the hash is stored."""

    credential_id: str
    token: str
    secret_hash: str


def issue_credential() -> IssuedCredential:
    credential_id = secrets.token_urlsafe(12)
    secret = secrets.token_urlsafe(32)  # 256 bits
    return IssuedCredential(credential_id, f"{credential_id}.{secret}", hash_secret(secret))


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


# What `issue_credential` makes (URL-safe base64), with room to spare: anything else is
# malformed, and a malformed token's parts are never recorded or logged.
_TOKEN_PART = re.compile(r"[A-Za-z0-9_-]{1,64}\.[A-Za-z0-9_-]{1,128}")


def split_token(token: Any) -> tuple[str, str] | None:
    """(credential id, secret) of a well-formed token, else None."""
    if not isinstance(token, str) or _TOKEN_PART.fullmatch(token) is None:
        return None
    credential_id, secret = token.split(".")
    return credential_id, secret


def secret_matches(secret: str, stored_hash: str) -> bool:
    """Constant-time comparison of a presented secret with the stored hash."""
    return hmac.compare_digest(hash_secret(secret).encode(), stored_hash.encode())


def new_approval_id() -> str:
    """A new approval's id: 128 random bits from `secrets`, so that nobody can work out
    another approval's id from what they know of it (its tenant, run and step). The id is
    recorded in the run's history (ApprovalRequested), and replay takes it from there."""
    return f"ap_{secrets.token_hex(16)}"


def approval_id_for(tenant: str, run_id: str, step: str) -> str:
    """The id approvals had before ids were random (a hash of tenant, run and step): what
    a recorded ApprovalRequested without an id stands for. New approvals never get one."""
    digest = hashlib.sha256(f"{tenant}\x1f{run_id}\x1f{step}".encode()).hexdigest()
    return f"ap_{digest[:24]}"
