"""The module the worker of the Ctrl-C acceptance test serves.

`held` tells the test it runs (the file `entered` in STOPPING_DIR) and then waits for
the test to create the file `gate` there: it is in flight for as long as the test needs.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import waypost as wp

DIR_ENV = "STOPPING_DIR"
GATE_LIMIT = 120.0  # a held attempt gives up waiting after this long (the test has failed)


@wp.activity
def held(ctx: wp.ActivityContext) -> str:
    folder = Path(os.environ[DIR_ENV])
    (folder / "entered").touch()
    limit = time.monotonic() + GATE_LIMIT
    while not (folder / "gate").exists():  # the test opens the gate; not a timing assumption
        if time.monotonic() > limit:
            raise TimeoutError("the gate was not opened")
        time.sleep(0.01)
    return "let go"


@wp.workflow(name="held", version="1")
async def held_run(ctx: wp.WorkflowContext) -> str:
    result: str = await ctx.run(held)
    return result


def hold_one(db: str, folder: Path) -> None:
    """Start a run of `held_run` on `db` (its id `held-1`) and return once its activity is
    in flight in the process that serves it (`folder` is that process's STOPPING_DIR)."""
    from tests.helpers import eventually  # the tests' side only: workers never call this

    with wp.Engine(db) as client:
        client.register(held_run, held)
        client.start(held_run, run_id="held-1")
    eventually(lambda: (folder / "entered").exists(), "the activity to start", 60)
