"""Tenant a's side of the noisy-neighbour test, in a process of its own.

Usage: python noisy_flood.py BASE KEY SECONDS THREADS. For SECONDS: one thread starts a
run of the `heavy` definition every second, and THREADS threads ask queries of the runs
started so far, as fast as the server answers. Prints, as JSON, the requests by status
and how many runs were started.
"""

from __future__ import annotations

import collections
import json
import os
import sys
import threading
import time

import httpx


def main(base: str, key: str, seconds: float, threads: int) -> None:
    stop = time.monotonic() + seconds
    statuses: collections.Counter[int] = collections.Counter()
    runs: list[str] = []
    lock = threading.Lock()
    heavy = {"items": list(range(1000)), "big": list(range(1, 24_001))}
    auth = {"Authorization": f"Bearer {key}"}

    def starts() -> None:
        with httpx.Client(base_url=base, headers=auth, timeout=120) as api:
            while time.monotonic() < stop:
                began = time.monotonic()
                got = api.post("/v1/runs", json={"workflow": "heavy", "input": heavy})
                with lock:
                    statuses[got.status_code] += 1
                    if got.status_code == 201:
                        runs.append(got.json()["run_id"])
                time.sleep(max(0.0, 1.0 - (time.monotonic() - began)))

    def queries(n: int) -> None:
        with httpx.Client(base_url=base, headers=auth, timeout=120) as api:
            i = n
            while time.monotonic() < stop:
                with lock:
                    run_id = runs[i % len(runs)] if runs else None
                i += 1
                if run_id is None:
                    time.sleep(0.01)
                    continue
                got = api.post(f"/v1/runs/{run_id}/queries/data", json={"args": []})
                with lock:
                    statuses[got.status_code] += 1

    workers = [threading.Thread(target=starts)]
    workers += [threading.Thread(target=queries, args=(n,)) for n in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    print(json.dumps({"statuses": dict(statuses), "runs": len(runs)}), flush=True)


if __name__ == "__main__":
    # The flood stands for clients on other machines: on the test's own machine it yields
    # the CPU to the server and to tenant b's client, which it would not share elsewhere.
    os.nice(10)
    main(sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4]))
