"""Named queues: at most 2 payments at once, at most 5 started a second, across every engine.

Run it: `python examples/queues.py` (a SQLite file in a temporary folder).
"""

from __future__ import annotations

import asyncio
import tempfile
import threading
import time
from pathlib import Path

import waypost as wp

running = 0
most = 0
lock = threading.Lock()


@wp.activity(queue="payments")
def charge(ctx: wp.ActivityContext, order: int) -> str:
    global running, most
    with lock:
        running += 1
        most = max(most, running)
    time.sleep(0.1)  # the payment provider's latency
    with lock:
        running -= 1
    return f"charged order {order}"


@wp.workflow()
async def checkout(ctx: wp.WorkflowContext, orders: list[int]) -> list[str]:
    return list(await asyncio.gather(*(ctx.run(charge, o) for o in orders)))


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        engine = wp.Engine(f"sqlite:///{Path(folder) / 'shop.db'}")
        engine.register(checkout, charge)
        engine.configure_queue("payments", concurrency=2, rate=(5, 1.0))
        with engine.running():
            run = engine.start(checkout, list(range(8)))
            time.sleep(0.3)
            q = engine.queue("payments")
            print(f"while it runs: {q.running} running, {q.depth} waiting")
            print(run.result(timeout=30)[-1])
        print(f"at most {most} payments ran at once")
        print([(q.name, q.concurrency, q.rate) for q in engine.queues()])
        engine.close()


if __name__ == "__main__":
    main()
