"""Sealing legacy runs: histories and rows written before they were bound to their run.

A history's first event chains to its run's genesis (bound to the tenant and run id),
and a run's row and its approvals' rows carry a check under the chain key (decision
0030). `SealLegacy`, run by a key holder, binds runs written before: each run's
history hashed again from its genesis under the current chain key, and a check on its
rows that have none, one transaction per run, and only where the run verifies as a
legacy one (its history intact, its rows agreeing with it). Re-exported by
`waypost.model.operations`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from waypost.model.identity import Role
from waypost.model.requests import PLATFORM_ONLY, Cli, RunBatch

MAX_SEAL_BATCH = 1_000  # runs per request (each in its own transaction)


@dataclass(frozen=True)
class SealLegacyReport:
    """What one `SealLegacy` did (or, with `dry_run`, would do).

    `runs`: runs looked at; `rehashed`: histories hashed again from their run's genesis;
    `rows`: rows (a run's, an approval's) given a check; `refused`: run id -> why it was
    left as it is (its history or its rows do not verify even as legacy ones: an
    operator must look); `next_after`: the run id to continue after, None when no run is
    left.
    """

    tenant: str
    dry_run: bool
    runs: int
    rehashed: int
    rows: int
    next_after: str | None
    refused: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class SealLegacy(RunBatch[SealLegacyReport]):
    """Bind runs written before histories and rows were bound to their run
    (`SealLegacyReport`). Admin, on an engine given the chain key.

    With `run_id`: that run (`RunNotFound` if the tenant has none). Without: up to `limit`
    of the tenant's runs whose ids sort after `after` (None: from the first); call again
    with the report's `next_after` until it is None. A run already bound is left as it
    is. `dry_run` counts and writes nothing.
    """

    roles = frozenset({Role.ADMIN})
    name = "seal-legacy"
    call = "seal_legacy"
    http = PLATFORM_ONLY
    cli = Cli("runs seal-legacy")
    most = MAX_SEAL_BATCH
