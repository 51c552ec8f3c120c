"""Child runs in the store's vocabulary: a child's link to its parent (`Store.run_links`
reads a run's links both ways).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ChildLink:
    """Where a child run comes from: its parent run, the parent's step, and what becomes
    of the child if the parent ends first (`cancel`, `terminate` or `abandon`)."""

    run_id: str
    step: str
    close: str = "cancel"
