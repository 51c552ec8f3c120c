"""Console users and their sessions (see `store/accounts.py`)."""

from __future__ import annotations

from waypost.model.events import canonical_json
from waypost.model.quotas import Quotas
from waypost.model.users import AttemptCount, HeldBy, SignInLimits, reserve_attempt

from ..accounts import SessionRecord, SignInAttempt, UserRecord
from ..tx import Row, Tx
from .access import api_key_from_row, roles_from_text
from .identities import refuse_taken
from .quotas import insert_admitted
from .records import from_row


def create_user(
    tx: Tx, user: UserRecord, quotas: Quotas | None = None, *, distinct: bool = False
) -> bool:
    if tx.one("tenant_exists", {"tenant": user.tenant}) is None:
        return False
    if distinct and tx.one("identity_as_user", {"tenant": user.tenant, "name": user.name}) is None:
        # A user of that name is UserExists, as it always was: the insert finds it.
        refuse_taken(tx, user.tenant, user.name, "a console user")
    params = {
        "tenant": user.tenant,
        "name": user.name,
        "roles": canonical_json(list(user.roles)),
        "password_hash": user.password_hash,
        "now": user.created_at,
        "by": user.created_by,
    }
    return insert_admitted(tx, "insert_user", params, quotas, "max_users", user.created_at)


def get_user(tx: Tx, tenant: str, name: str) -> UserRecord | None:
    row = tx.one("get_user", {"tenant": tenant, "name": name})
    return user_from_row(row) if row is not None else None


def list_users(tx: Tx, tenant: str) -> list[UserRecord]:
    return [user_from_row(row) for row in tx.all("list_users", {"tenant": tenant})]


def disable_user(tx: Tx, tenant: str, name: str, by: str, now: float) -> bool:
    key = {"tenant": tenant, "name": name}
    if tx.one("get_user", key) is None:
        return False
    tx.run("disable_user", {**key, "by": by, "now": now})
    tx.run("end_user_sessions", {**key, "now": now})
    return True


def set_password(tx: Tx, tenant: str, name: str, password_hash: str, now: float) -> bool:
    key = {"tenant": tenant, "name": name}
    if tx.run("set_password", {**key, "password_hash": password_hash, "now": now}) != 1:
        return False
    tx.run("end_user_sessions", {**key, "now": now})
    tx.run("forget_user_sign_in_attempts", key)  # a new password: the holds start over
    return True


def record_sign_in(
    tx: Tx, tenant: str, name: str, succeeded: bool, locked_until: float | None
) -> None:
    key = {"tenant": tenant, "name": name}
    if succeeded:
        tx.run("clear_sign_in_failures", key)
    else:
        tx.run("count_sign_in_failure", {**key, "locked_until": locked_until})


def reserve_sign_in(
    tx: Tx, attempt: SignInAttempt, limits: SignInLimits, now: float
) -> HeldBy | None:
    tx.run("forget_sign_in_attempts", {"before": now - limits.forget_after})
    keys = attempt.keys()
    for key in keys:
        tx.run("insert_sign_in_attempt", {**key, "now": now})
    counts = []
    for key in keys:  # locked in one order by every attempt (PostgreSQL: FOR UPDATE)
        row = tx.one("lock_sign_in_attempt", key)
        assert row is not None  # inserted above if it was not there
        counts.append(AttemptCount(row["failures"], row["window_start"], row["held_until"]))
    account, pair = (counts[1], counts[2]) if attempt.user is not None else (None, None)
    decided = reserve_attempt(counts[0], account, pair, now, limits)
    if isinstance(decided, HeldBy):
        return decided
    for key, count in zip(keys, decided, strict=False):
        assert count is not None
        tx.run(
            "update_sign_in_attempt",
            {
                **key,
                "failures": count.failures,
                "window_start": count.window_start,
                "held_until": count.held_until,
                "now": now,
            },
        )
    return None


def settle_sign_in(tx: Tx, attempt: SignInAttempt, now: float) -> None:
    address, *user_rows = attempt.keys()
    tx.run("uncount_sign_in_attempt", {**address, "now": now})
    if user_rows:
        account, pair = user_rows
        tx.run("uncount_sign_in_attempt", {**account, "now": now})
        tx.run("delete_sign_in_attempt", pair)


def create_session(tx: Tx, session: SessionRecord) -> None:
    tx.run("delete_expired_sessions", {"now": session.created_at})
    tx.run(
        "insert_session",
        {
            "token_hash": session.token_hash,
            "tenant": session.tenant,
            "subject": session.subject,
            "kind": session.kind,
            "credential": session.credential,
            "now": session.created_at,
            "expires_at": session.expires_at,
        },
    )


def get_session(tx: Tx, token_hash: str) -> SessionRecord | None:
    row = tx.one("get_session", {"token_hash": token_hash})
    if row is None:
        return None
    user = key = None
    if row["kind"] == "password":
        found = tx.one("get_user", {"tenant": row["tenant"], "name": row["credential"]})
        user = user_from_row(found) if found is not None else None
    else:
        found = tx.one("api_key_to_authenticate", {"key_id": row["credential"]})
        key = api_key_from_row(found) if found is not None else None
    status = tx.one("tenant_disabled_at", {"tenant": row["tenant"]})
    return from_row(
        SessionRecord,
        row,
        "token_hash tenant subject kind credential created_at expires_at",
        user=user,
        key=key,
        tenant_disabled=status is not None and status["disabled_at"] is not None,
    )


def end_session(tx: Tx, token_hash: str, now: float) -> None:
    tx.run("end_session", {"token_hash": token_hash, "now": now})


def user_from_row(row: Row) -> UserRecord:
    return from_row(
        UserRecord,
        row,
        "tenant name password_hash created_at created_by disabled_at disabled_by"
        " password_changed_at failed_sign_ins locked_until",
        roles=roles_from_text(row["roles"]),
    )
