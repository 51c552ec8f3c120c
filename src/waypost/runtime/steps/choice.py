"""The `choice` step type: the first choice whose `when` holds, else `default`; passing
it more than `max_iterations` times fails the step."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .walk import StepFailure, Walk


async def run(
    walk: Walk, step_id: str, step: Mapping[str, Any], data: dict[str, Any], path: str
) -> str | None:
    passes = walk.count_pass(step_id)
    bound = step.get("max_iterations")
    if bound is not None and passes > int(bound):
        raise StepFailure(
            "too_many_iterations",
            f"the run passed choice {step_id!r} more than {bound} times",
            step_id,
        )
    for i, choice in enumerate(step["choices"]):
        if walk.holds(choice["when"], data, step_id, f"choices[{i}]"):
            chosen: str = choice["next"]
            return chosen
    default: str = step["default"]
    return default
