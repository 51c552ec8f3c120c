"""Identities of a tenant: what a name already is, before a tenant admin makes a credential
for it (a console user, an API key).

A person is known to a tenant by name: as a console user, as the principal of an API
key, as a member of a group of the built-in directory, or as an approver a pending
approval names. A credential made for such a name lets whoever holds it act, vote and
be counted as that person, so a tenant admin may not make one for a name that is already
someone's (decision 0028); the check runs in the transaction that inserts the
credential. Names are compared in their normal form, as every one of them is stored.
"""

from __future__ import annotations

from waypost.errors import IdentityTaken
from waypost.model.identity import preview

from ..tx import Tx


def identity_of(tx: Tx, tenant: str, name: str) -> str | None:
    """What `name` is already in `tenant`, in words; None if it is nobody yet."""
    key = {"tenant": tenant, "name": name}
    if tx.one("identity_as_user", key) is not None:
        return "a console user"
    if tx.one("identity_as_key", key) is not None:
        return "the principal of an API key"
    member = tx.one("identity_as_member", key)
    if member is not None:
        return f"a member of group {preview(member['group_name'])}"
    approval = tx.one("identity_as_approver", key)
    if approval is not None:
        return f"an approver of pending approval {preview(approval['approval_id'])}"
    return None


def refuse_taken(tx: Tx, tenant: str, name: str, making: str) -> None:
    """Raise `IdentityTaken` if `name` is already someone's identity in `tenant`."""
    what = identity_of(tx, tenant, name)
    if what is not None:
        raise IdentityTaken(
            f"{preview(name)} is already {what} in tenant {preview(tenant)}: a tenant "
            f"admin may not make {making} for another person's name (the platform "
            "operator may, with the command line or the embedded API)"
        )
