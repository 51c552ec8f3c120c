"""Child runs in the store's vocabulary, declared apart from `base.py` for its size
(`Store` includes them): a child's link to its parent, and the verb that reads a run's
links both ways.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class ChildLink:
    """Where a child run comes from: its parent run, the parent's step, and what becomes
    of the child if the parent ends first (`cancel`, `terminate` or `abandon`)."""

    run_id: str
    step: str
    close: str = "cancel"


class ChildStore(Protocol):
    async def run_links(self, tenant: str, run_id: str) -> dict[str, Any] | None:
        """The run's `parent` (`run_id`, `step`, `close`; None if it has none) and its
        `children` (`run_id`, `step`, `workflow`, `version`, `status`, `close`), oldest
        first; None if there is no such run."""
        ...
