"""Workflow queues: one report at a time, the rest enqueued, the urgent one next.

Run it: `python examples/workflow_queues.py` (a SQLite file in a temporary folder).
"""

from __future__ import annotations

import tempfile
import threading
import time
from pathlib import Path

import waypost as wp

running = 0
most = 0
order: list[str] = []
lock = threading.Lock()


@wp.activity()
def render(ctx: wp.ActivityContext, name: str) -> str:
    global running, most
    with lock:
        running += 1
        most = max(most, running)
        order.append(name)
    time.sleep(0.1)  # an expensive report
    with lock:
        running -= 1
    return f"{name}.pdf"


@wp.workflow(queue="reports")  # a start that names no queue waits in "reports"
async def report(ctx: wp.WorkflowContext, name: str) -> str:
    return str(await ctx.run(render, name))


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        engine = wp.Engine(f"sqlite:///{Path(folder) / 'reports.db'}")
        engine.register(report, render)
        engine.configure_queue("reports", concurrency=1)  # one run admitted at a time
        with engine.running():
            runs = [engine.start(report, f"monthly-{i}") for i in range(3)]
            urgent = engine.start(report, "urgent", priority=10)
            q = engine.queue("reports")
            print(f"admitted {q.runs_admitted}, enqueued {q.runs_enqueued}")
            print(f"urgent is {engine.get(urgent.run_id).status}")
            print([r.result(timeout=30) for r in [*runs, urgent]][-1])
        print(f"at most {most} report ran at once; in order: {', '.join(order)}")
        engine.close()


if __name__ == "__main__":
    main()
