"""Waiting on people: fold signals into workflow state and wait for a condition.

Two of three reviewers must approve within a deadline; each approval arrives
as a signal. Run it from the repository root:
    .venv/bin/python examples/approvals_by_signal.py
"""

from __future__ import annotations

import sys
from datetime import timedelta

import waypost as wp


@wp.activity
def publish(ctx: wp.ActivityContext, doc: str) -> str:
    return f"{doc} published"


@wp.workflow(name="review")
async def review(ctx: wp.WorkflowContext, doc: str) -> dict[str, object]:
    approvals: set[str] = set()
    ctx.on_signal("approve", lambda who: approvals.add(who))
    timed_out = await ctx.wait_condition(lambda: len(approvals) >= 2, timeout=timedelta(seconds=5))
    if timed_out:
        return {"doc": doc, "status": "expired", "approvals": sorted(approvals)}
    return {"doc": doc, "status": await ctx.run(publish, doc), "approvals": sorted(approvals)}


def main() -> int:
    with wp.Engine("sqlite:///review-example.db") as engine:
        engine.register(review, publish)
        with engine.running():
            run = engine.start(review, "pricing-2027.pdf")
            engine.signal(run.run_id, "approve", "ada")
            engine.signal(run.run_id, "approve", "ada")  # the same person twice counts once
            engine.signal(run.run_id, "approve", "grace")
            print(run.run_id, "->", run.result(timeout=30))
    return 0


if __name__ == "__main__":
    sys.exit(main())
