"""Published workflow definitions: numbered versions per name, one per digest.

Publishing takes the next version number with `INSERT ... ON CONFLICT DO
NOTHING`: the primary key (tenant, name, version) and the unique digest per
name decide between concurrent publishers, not a lock. On PostgreSQL (READ
COMMITTED) an insert that meets another transaction's uncommitted row waits for
it, and each statement sees what committed before it began, so every lost round
means another publisher's version was committed: the loser reads the new newest
version (or finds its own content published) and tries the next number. Every
round some publisher wins, so a publisher loses at most as many rounds as
there are publishers racing it; `MAX_PUBLISH_ROUNDS` bounds the wait beyond
any real concurrency, and then the publish fails with `StoreContention`
(nothing written: try again). On SQLite writers are serialised and the first
round always wins.
"""

from __future__ import annotations

from typing import Any

from waypost.errors import StoreContention
from waypost.model.events import canonical_json
from waypost.model.quotas import Quotas

from ..rows import DefinitionRecord
from ..tx import Tx
from .quotas import admit_definition
from .records import definition_from_row

MAX_PUBLISH_ROUNDS = 200


def publish_definition(
    tx: Tx,
    tenant: str,
    name: str,
    digest: str,
    body: dict[str, Any],
    source: str,
    by: str | None,
    now: float,
    quotas: Quotas | None = None,
) -> tuple[DefinitionRecord, bool]:
    key = {"tenant": tenant, "name": name}
    admitted = quotas is None
    for _ in range(MAX_PUBLISH_ROUNDS):  # another publisher may take the next version first
        found = tx.one("definition_by_digest", {**key, "digest": digest})
        if found is not None:
            row = tx.one("get_definition", {**key, "version": found["version"]})
            assert row is not None
            return definition_from_row(row), False
        if not admitted and quotas is not None:
            admit_definition(tx, tenant, quotas, now)  # a version found again costs nothing
            admitted = True
        newest = tx.one("newest_definition_version", key)
        version = int(newest["newest_version"] or 0) + 1 if newest is not None else 1
        inserted = tx.run(
            "insert_definition",
            {
                **key,
                "version": version,
                "digest": digest,
                "body": canonical_json(body),
                "source": source,
                "now": now,
                "by": by,
            },
        )
        if inserted:
            row = tx.one("get_definition", {**key, "version": version})
            assert row is not None
            return definition_from_row(row), True
    raise StoreContention(
        f"publishing definition {name!r} lost the race for a version number "
        f"{MAX_PUBLISH_ROUNDS} times to other publishers; nothing was published: try again"
    )


def get_definition(
    tx: Tx, tenant: str, name: str, version: int | None = None
) -> DefinitionRecord | None:
    """A version of a definition; the newest without `version`."""
    key = {"tenant": tenant, "name": name}
    if version is None:
        row = tx.one("get_newest_definition", key)
    else:
        row = tx.one("get_definition", {**key, "version": version})
    return definition_from_row(row) if row is not None else None


def list_definitions(tx: Tx, tenant: str, name: str | None = None) -> list[DefinitionRecord]:
    """The tenant's versions by name and version; only `name`'s (on the index) if given."""
    if name is not None:
        rows = tx.all("list_definition_versions", {"tenant": tenant, "name": name})
    else:
        rows = tx.all("list_definitions", {"tenant": tenant})
    return [definition_from_row(r) for r in rows]
