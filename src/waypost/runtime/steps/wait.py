"""The `wait` step type: a signal (optionally correlated), a duration, or a moment
(`until`), with an optional `timeout` that goes to `on_timeout` or fails the step. The
step waits, so a migration may move it."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from waypost.errors import InvalidRequest, WaitTimeout
from waypost.model.identity import check_id

from .walk import StepFailure, Walk, waiting


def _instant(value: Any, step: str) -> float:
    """Seconds since the epoch of an ISO-8601 date-time (UTC when it names no zone)."""
    if not isinstance(value, str):
        raise StepFailure(
            "expression_failed",
            f"step {step!r}: 'until' gave {value!r}, not an ISO-8601 date-time",
            step,
        )
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise StepFailure(
            "expression_failed",
            f"step {step!r}: 'until' gave {value!r}, not an ISO-8601 date-time",
            step,
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


@waiting
async def run(
    walk: Walk, step_id: str, step: Mapping[str, Any], data: dict[str, Any], path: str
) -> str | None:
    ctx = walk.ctx
    timeout = step.get("timeout")
    if "signal" in step:
        correlate = _correlation(walk, step_id, step, data)
        try:
            payload = await ctx.wait_signal(step["signal"], timeout, correlate=correlate)
        except WaitTimeout:
            return _timed_out_at(step_id, step)
        walk.store(step_id, step, data, payload)
        signalled: str | None = step.get("next")
        return signalled
    if "duration" in step:
        delay = float(step["duration"])
        if timeout is not None and float(timeout) < delay:
            await ctx.sleep(float(timeout))
            return _timed_out_at(step_id, step)
        await ctx.sleep(delay)
    else:
        at = _instant(walk.evaluate(step["until"], data, step_id, "until"), step_id)
        now = asyncio.get_running_loop().time()  # the time of the event being handled
        if timeout is not None and now + float(timeout) < at:
            await ctx.sleep(float(timeout))
            return _timed_out_at(step_id, step)
        await walk.inst.sleep_until(at)
    waited: str | None = step.get("next")
    return waited


def _correlation(
    walk: Walk, step_id: str, step: Mapping[str, Any], data: dict[str, Any]
) -> tuple[str, str] | None:
    """A wait's `correlate` pair: its key, and its value expression's text or number."""
    correlate = step.get("correlate")
    if not isinstance(correlate, Mapping):
        return None
    value = walk.evaluate(correlate["value"], data, step_id, "correlate.value")
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    try:
        return str(correlate["key"]), check_id(value, "correlate.value")
    except InvalidRequest as exc:
        raise StepFailure(
            "expression_failed",
            f"step {step_id!r} correlate.value must give a string or a whole number: {exc}",
            step_id,
        ) from None


def _timed_out_at(step_id: str, step: Mapping[str, Any]) -> str:
    if "on_timeout" in step:
        target: str = step["on_timeout"]
        return target
    raise StepFailure(
        "timeout", f"step {step_id!r} waited {float(step['timeout']):g} s in vain", step_id
    )
