"""Finding runs: by id, by the start of an id, by a correlation value they wait with; and
counting a tenant's runs by status."""

from __future__ import annotations

from ..commits import RunRecord
from ..tx import Row, Tx
from .run_pages import fitting, runs_by_ids


def search_runs(
    tx: Tx, tenant: str, text: str, limit: int, max_bytes: int | None = None
) -> list[RunRecord]:
    """The newest `limit` runs found, no more than `max_bytes` of their stored payloads
    (one run at least): the sizes first, then the rows that fit (`run_pages.py`)."""
    found: dict[str, Row] = {}
    params = {
        "tenant": tenant,
        "text": text,
        "length": len(text),
        "limit": limit,
        "after_prefix": after_prefix(text),
    }
    for name in (
        "search_run_size_by_id",
        "search_run_sizes_by_prefix",
        "search_run_sizes_by_correlation",
    ):
        for row in tx.all(name, params):
            found.setdefault(row["run_id"], row)
    newest = sorted(found.values(), key=lambda r: (r["created_at"], r["run_id"]), reverse=True)
    chosen, _ = fitting(newest, limit, max_bytes)
    return runs_by_ids(tx, tenant, [r["run_id"] for r in chosen])


def after_prefix(prefix: str) -> str:
    """The first text after every text that starts with `prefix`, in code point order:
    the prefix with its last character incremented (so a range on the index finds them)."""
    stripped = prefix.rstrip("\U0010ffff")
    if not stripped:
        return "\U0010ffff" * (len(prefix) + 1)
    return stripped[:-1] + chr(ord(stripped[-1]) + 1)


def count_runs(tx: Tx, tenant: str) -> dict[str, int]:
    return {row["status"]: int(row["runs"]) for row in tx.all("count_runs", {"tenant": tenant})}
