"""Finding runs: by id, by the start of an id, by a correlation value they wait with; and
counting a tenant's runs by status."""

from __future__ import annotations

from ..base import RunRecord
from ..tx import Tx
from .records import run_from_row


def search_runs(tx: Tx, tenant: str, text: str, limit: int) -> list[RunRecord]:
    found: dict[str, RunRecord] = {}
    params = {
        "tenant": tenant,
        "text": text,
        "length": len(text),
        "limit": limit,
        "after_prefix": after_prefix(text),
    }
    for name in ("search_run_by_id", "search_runs_by_prefix", "search_runs_by_correlation"):
        for row in tx.all(name, params):
            run = run_from_row(row, tx)
            found.setdefault(run.run_id, run)
    newest = sorted(found.values(), key=lambda r: (r.created_at, r.run_id), reverse=True)
    return newest[:limit]


def after_prefix(prefix: str) -> str:
    """The first text after every text that starts with `prefix`, in code point order:
    the prefix with its last character incremented (so a range on the index finds them)."""
    stripped = prefix.rstrip("\U0010ffff")
    if not stripped:
        return "\U0010ffff" * (len(prefix) + 1)
    return stripped[:-1] + chr(ord(stripped[-1]) + 1)


def count_runs(tx: Tx, tenant: str) -> dict[str, int]:
    return {row["status"]: int(row["runs"]) for row in tx.all("count_runs", {"tenant": tenant})}
