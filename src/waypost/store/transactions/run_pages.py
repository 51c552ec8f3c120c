"""Runs read many at a time (pages, lists, searches), bounded in bytes.

A run's row holds its payloads (input, result, error: up to the payload limit each,
results larger), so a thousand rows can be gigabytes. Every read of many runs with
their payloads goes in two steps in one (snapshot) transaction, as a page of history
does: the keys and the stored size of each run's payloads first (a statement that
reads no payload on PostgreSQL: a value kept out of line is measured, not fetched),
then the rows of the runs that fit the bound, on the primary key (`runs_by_ids`).
A run left out of a page is never brought into the process; every run returned is
checked on read (`run_from_row`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

from ..commits import RunRecord
from ..tx import Row, Tx
from .records import run_from_row


def fitting(sizes: Sequence[Row], limit: int, max_bytes: int | None) -> tuple[list[Row], bool]:
    """The first of `sizes` (rows with a `size`), at most `limit` and no more than
    `max_bytes` of their sizes (one at least, whatever its size); and whether more
    follow (rows beyond `limit`, or left out by the bound)."""
    chosen: list[Row] = []
    total = 0
    for row in sizes[:limit]:
        total += int(row["size"] or 0)
        if max_bytes is not None and total > max_bytes and chosen:
            return chosen, True
        chosen.append(row)
    return chosen, len(sizes) > limit


def runs_by_ids(tx: Tx, tenant: str, run_ids: Sequence[str]) -> list[RunRecord]:
    """The tenant's runs of `run_ids`, in that order, each checked on read (one that was
    removed meanwhile is left out: a caller outside a snapshot may see that)."""
    if not run_ids:
        return []
    rows = tx.all("runs_by_ids", {"tenant": tenant, "run_ids": json.dumps(list(run_ids))})
    found = {r["run_id"]: r for r in rows}
    return [run_from_row(found[i], tx) for i in run_ids if i in found]


# One statement per combination of filters, so each has a plan on its index (an
# "x IS NULL OR" condition would leave a generic plan scanning and sorting).
_PAGE_QUERIES = {
    (False, False, False): "page_run_sizes",
    (True, False, False): "page_run_sizes_by_status",
    (False, True, False): "page_run_sizes_by_workflow",
    (True, True, False): "page_run_sizes_by_status_workflow",
    (False, True, True): "page_run_sizes_by_workflow_version",
    (True, True, True): "page_run_sizes_by_status_workflow_version",
}


def page_runs(
    tx: Tx,
    tenant: str,
    status: str | None,
    workflow: str | None,
    after: tuple[float, str] | None,
    limit: int,
    max_bytes: int | None,
    version: str | None = None,
) -> tuple[list[RunRecord], bool]:
    """Up to `limit` of the tenant's runs, newest first (by created_at, then run_id),
    after the position `after` (or from the newest), no more than `max_bytes` of their
    stored payloads (one run at least); and whether more follow. Read through an index.
    A `version` is of the `workflow` (the caller checks that one is given)."""
    name = _PAGE_QUERIES[(status is not None, workflow is not None, version is not None)]
    after_at, after_id = after if after is not None else (math.inf, "")
    params = {
        "tenant": tenant,
        "status": status,
        "workflow": workflow,
        "version": version,
        "after_at": after_at,
        "after_id": after_id,
        "limit": limit + 1,  # one more says whether more follow
    }
    chosen, more = fitting(tx.all(name, params), limit, max_bytes)
    return runs_by_ids(tx, tenant, [r["run_id"] for r in chosen]), more


def list_runs(
    tx: Tx,
    tenant: str | None = None,
    status: str | None = None,
    workflow: str | None = None,
    limit: int = 100,
    max_bytes: int | None = None,
) -> list[RunRecord]:
    """Up to `limit` runs (of every tenant if `tenant` is None), newest first; with
    `max_bytes`, no more than that of their stored payloads (one run at least)."""
    params = {"tenant": tenant, "status": status, "workflow": workflow, "limit": limit}
    if max_bytes is None:
        return [run_from_row(r, tx) for r in tx.all("list_runs", params)]
    chosen, _ = fitting(tx.all("list_run_sizes", params), limit, max_bytes)
    by_tenant: dict[str, list[str]] = {}
    for row in chosen:
        by_tenant.setdefault(row["tenant"], []).append(row["run_id"])
    found = {
        (run.tenant, run.run_id): run
        for owner, run_ids in by_tenant.items()
        for run in runs_by_ids(tx, owner, run_ids)
    }
    keys = ((row["tenant"], row["run_id"]) for row in chosen)
    return [found[key] for key in keys if key in found]
