"""The seam where a run's steps are drawn.

`for_run` answers what the run page shows of the run's steps as a picture: None until
a renderer of definition graphs is plugged in here, and then the page shows its SVG
with each step coloured by its state. Without one, the page lists the steps so far,
coloured by state (what it always does for code workflows).
"""

from __future__ import annotations

from typing import Any

from waypost.client.engine import AsyncEngine
from waypost.model.identity import Principal
from waypost.model.records import RunInfo

from .history import Story


async def for_run(engine: AsyncEngine, principal: Principal, info: RunInfo, told: Story) -> Any:
    """The run's definition drawn with its steps' states (markup), or None."""
    return None
