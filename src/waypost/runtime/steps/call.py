"""The `call` step type: another published definition of the tenant, run as a child
(`runtime/calls.py` starts it); its failure is the step's `call_failed`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from waypost.errors import ChildFailed
from waypost.runtime.calls import start_call

from .walk import StepFailure, Walk

DEFINITIONS_QUEUE = "waypost:definitions"
"""The workflow queue of every definition run: any engine can interpret any definition."""


async def run(
    walk: Walk, step_id: str, step: Mapping[str, Any], data: dict[str, Any], path: str
) -> str | None:
    inputs = walk.mapping(step.get("input"), data, step_id, "input")
    try:
        result = await start_call(walk.inst, step, inputs, walk.limits, DEFINITIONS_QUEUE)
    except ChildFailed as exc:
        raise StepFailure(
            "call_failed",
            f"step {step_id!r} (definition {step['definition']!r}) {exc.status}: "
            f"{exc.type}: {exc.message}",
            step_id,
            type=exc.type,
        ) from None
    walk.store(step_id, step, data, result)
    next_step: str | None = step.get("next")
    return next_step
