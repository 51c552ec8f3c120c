"""The `activity` step type: a registered activity, or the built-in `http` one.

An `activity` step schedules the registered activity with the step's input mapping as
keyword arguments; an `http` step schedules the built-in `waypost.http` activity. The
step's retry policy and timeout travel in the scheduled event; an activity no process
here registers is still scheduled (a worker elsewhere may serve it). A completed step
with `compensate` leaves its undoing to the walk; one an operator skipped did nothing,
so there is nothing to undo.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from waypost.errors import ActivityError
from waypost.runtime.loop import StepFuture

from .walk import StepFailure, Walk

HTTP_ACTIVITY = "waypost.http"
"""The built-in activity that carries out `http` steps (engines given `http_allow` serve it)."""

_RETRY_FIELDS: dict[str, type] = {
    "max_attempts": int,
    "initial_interval": float,
    "backoff": float,
    "max_interval": float,
}


def _retry(spec: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The retry fields a step sets (seconds); the activity's policy supplies the rest."""
    if not spec:
        return None
    return {name: cast(spec[name]) for name, cast in _RETRY_FIELDS.items() if name in spec}


def _spec(walk: Walk, step_id: str, step: Mapping[str, Any], **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "definition_step": step_id,
        "definition_version": walk.version,
        **extra,
    }
    if "timeout" in step:
        spec["timeout"] = float(step["timeout"])
    if "queue" in step:
        spec["queue"] = step["queue"]
    retry = _retry(step.get("retry"))
    if retry is not None:
        spec["retry"] = retry
    return spec


async def run(
    walk: Walk, step_id: str, step: Mapping[str, Any], data: dict[str, Any], path: str
) -> str | None:
    args: tuple[Any, ...]
    if "http" in step:
        http = step["http"]
        body = walk.mapping(http.get("body"), data, step_id, "body")
        request: dict[str, Any] = {
            "url": http["url"],
            "method": http.get("method") or ("POST" if "body" in http else "GET"),
            "headers": dict(http.get("headers") or {}),
            "timeout": float(step.get("timeout", 30)),
        }
        if "body" in http:
            request["body"] = body
        if "signature" in http:
            request["signature"] = dict(http["signature"])
        name, args, kwargs = HTTP_ACTIVITY, (request,), {}
    else:
        name, args = step["activity"], ()
        kwargs = walk.mapping(step.get("input"), data, step_id, "input")
    call = walk.inst.schedule_activity(name, args, kwargs, _spec(walk, step_id, step))
    try:
        result = await call
    except ActivityError as exc:
        message = exc.error.get("message") or str(exc)
        raise StepFailure(
            "activity_failed",
            f"step {step_id!r} ({name}) failed after {exc.attempts} attempt(s): {message}",
            step_id,
            type=exc.type,
        ) from None
    walk.store(step_id, step, data, result)
    compensate = step.get("compensate")
    # A step an operator skipped did nothing here: there is nothing of it to undo.
    if compensate is not None and not (isinstance(call, StepFuture) and call.skipped):
        walk.add_compensation(
            {
                "step": step_id,
                "version": walk.version,
                "activity": compensate["activity"],
                "input": walk.mapping(compensate.get("input"), data, step_id, "compensate"),
            }
        )
    next_step: str | None = step.get("next")
    return next_step
