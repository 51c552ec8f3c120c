"""The step types of a definition run, one module each, behind one table.

`STEP_TYPES` maps a step's `type` to its handler: `await handler(walk, step_id, step,
data, path)` carries the step out on the walk's `data` (`walk.Walk`, the interpreter)
and returns the next step's id (None ends the walk), or raises `StepFailure`. `succeed`
and `fail` end a walk and are the interpreter's own; `catch` is applied around every
handler by the interpreter; a step type that waits is marked `@walk.waiting`. To add
a step type: write `steps/<type>.py` with its `run`, add it to `STEP_TYPES` here, and
teach the definition format (`model/definitions/format.py`'s `STEP_TYPES`) and its
validation the new type; tests/unit/test_step_types.py checks the two tables agree.
"""

from __future__ import annotations

from . import activity, approval, call, choice, map, parallel, pass_, wait
from .walk import StepFailure, StepHandler, Walk, expression_failure, value_at, waiting

STEP_TYPES: dict[str, StepHandler] = {
    "activity": activity.run,
    "approval": approval.run,
    "wait": wait.run,
    "choice": choice.run,
    "parallel": parallel.run,
    "map": map.run,
    "pass": pass_.run,
    "call": call.run,
}

__all__ = [
    "STEP_TYPES",
    "StepFailure",
    "StepHandler",
    "Walk",
    "expression_failure",
    "value_at",
    "waiting",
]
