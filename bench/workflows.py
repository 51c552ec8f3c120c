"""The benchmark's workflow: 20 no-op activities in a row (served by bench workers too)."""

from __future__ import annotations

import waypost as wp

STEPS = 20


@wp.activity
def noop_sync(ctx: wp.ActivityContext) -> None:
    return None


@wp.activity
async def noop_async(ctx: wp.ActivityContext) -> None:
    return None


@wp.workflow(name="bench20")
async def bench20(ctx: wp.WorkflowContext, kind: str) -> int:
    step = noop_async if kind == "async" else noop_sync
    for _ in range(STEPS):
        await ctx.run(step)
    return STEPS


def definition(kind: str) -> dict[str, object]:
    """The same workflow defined as data: 20 activity steps in a row."""
    name = "noop_async" if kind == "async" else "noop_sync"
    steps: dict[str, object] = {
        f"s{i}": {
            "type": "activity",
            "activity": name,
            **({"next": f"s{i + 1}"} if i < STEPS else {}),
        }
        for i in range(1, STEPS + 1)
    }
    return {"name": f"bench20_{kind}", "start": "s1", "steps": steps}
