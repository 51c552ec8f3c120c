"""What a child run costs: a parent awaiting N children one after another, against the
same parent awaiting N activities (one engine, in this process).

    .venv/bin/python bench/child_runs.py                     # SQLite in a temporary folder
    .venv/bin/python bench/child_runs.py --db postgresql://postgres@127.0.0.1:5432/bench
    .venv/bin/python bench/child_runs.py --n 200
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import waypost as wp


@wp.activity
def noop(ctx: wp.ActivityContext, n: int) -> int:
    return n


@wp.workflow(name="bench_leaf")
async def leaf(ctx: wp.WorkflowContext, n: int) -> int:
    return n


@wp.workflow(name="bench_by_children")
async def by_children(ctx: wp.WorkflowContext, n: int) -> int:
    total = 0
    for i in range(n):
        total += await ctx.child(leaf, i)
    return total


@wp.workflow(name="bench_by_activities")
async def by_activities(ctx: wp.WorkflowContext, n: int) -> int:
    total = 0
    for i in range(n):
        total += await ctx.run(noop, i)
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--db", help="a database URL (default: SQLite in a temporary folder)")
    parser.add_argument("--n", type=int, default=100, help="children (and activities) per run")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        url = args.db or f"sqlite:///{Path(folder) / 'bench.db'}"
        engine = wp.Engine(url, poll_interval=0.05)
        engine.register(noop, leaf, by_children, by_activities)
        with engine.running():
            for workflow in (by_activities, by_children, by_activities, by_children):
                began = time.perf_counter()
                run = engine.start(workflow, args.n)
                engine.result(run.run_id, timeout=600)
                took = time.perf_counter() - began
                name = workflow.__name__
                print(
                    f"{name:14} {args.n} steps in {took:.2f}s: {1000 * took / args.n:.1f} ms/step"
                )
        engine.close()


if __name__ == "__main__":
    main()
