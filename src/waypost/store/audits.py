"""Audits in the store's vocabulary (the verbs are `Store`'s, in `base.py`): a run read
whole for `verify` without refusing what fails its checks, and the sealing of a run
written before histories and rows were bound to their run (decision 0030).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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
