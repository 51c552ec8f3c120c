"""The `pass` step type: evaluates every value of `set` on the data as it was before
the step, then stores them in order."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from waypost.model.definitions.expressions import parse_output_path

from .walk import Walk


async def run(
    walk: Walk, step_id: str, step: Mapping[str, Any], data: dict[str, Any], path: str
) -> str | None:
    values = walk.mapping(step["set"], data, step_id, "set")
    for location, value in values.items():
        walk.assign(data, parse_output_path(location), value)
    next_step: str | None = step.get("next")
    return next_step
