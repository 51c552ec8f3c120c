"""Audits in the store's vocabulary, declared apart from `base.py` for its size (`Store`
includes them): a run read whole for `verify` without refusing what fails its checks,
and the sealing of a run written before histories and rows were bound to their run
(decision 0030).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from waypost.model.events import Event


@dataclass(frozen=True, slots=True)
class RunAudit:
    """A run's row and history as stored, and what fails the checks of its rows (its
    own and its approvals'), for `verify`. Nothing here is refused: it is read to be
    judged."""

    status: str
    input_json: str
    result: Any
    error: Any
    last_seq: int
    last_hash: str
    events: list[Event]
    problems: list[str]


@dataclass(frozen=True, slots=True)
class LegacySeal:
    """What sealing one run did (or, dry, would do): its history hashed again from its
    run's genesis (`rehashed`), and how many rows got a check (`rows`); or why the run
    was left as it is (`refused`: its history or rows do not verify as they are)."""

    rehashed: bool = False
    rows: int = 0
    refused: str | None = None


class AuditStore(Protocol):
    async def audit_run(self, tenant: str, run_id: str) -> RunAudit | None:
        """The run's row and history as stored, and what fails the checks of its rows
        and its approvals' rows (None: no such run)."""
        ...

    async def seal_legacy_run(self, tenant: str, run_id: str, dry_run: bool) -> LegacySeal | None:
        """Bind a run written before histories and rows were bound to their run: its
        history hashed again from its genesis under the current chain key, and a check
        on its row and its approvals' rows that have none; in one transaction, only if
        its history verifies as a legacy one and its rows agree with it (None: no such
        run). `dry_run` writes nothing."""
        ...
