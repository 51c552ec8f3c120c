"""Activities for the definition crash test, served by `waypost worker --app definition_app`.

DEF_LOG (env): each execution appends one JSON line {"step", "key", "attempt"}
when it enters its body. DEF_HOLD (env, a step name): an execution of that
step waits inside its body until the process is killed.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import waypost as wp


def _log(step: str, ctx: wp.ActivityContext) -> None:
    line = json.dumps({"step": step, "key": ctx.idempotency_key, "attempt": ctx.attempt})
    fd = os.open(os.environ["DEF_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


@wp.activity(name="crash.work")
def work(ctx: wp.ActivityContext, step: str, value: int) -> int:
    _log(step, ctx)
    if os.environ.get("DEF_HOLD") == step:
        while True:  # held here until SIGKILL
            time.sleep(0.05)
    return value * 2


@wp.activity(name="crash.undo")
def undo(ctx: wp.ActivityContext, step: str) -> None:
    _log(f"undo {step}", ctx)


def read_log(path: str) -> list[dict[str, Any]]:
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.endswith("\n")]
