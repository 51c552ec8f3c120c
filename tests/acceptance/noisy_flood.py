"""Tenant a's side of the noisy-neighbour test, in a process of its own.

Usage: python noisy_flood.py BASE KEY SECONDS THREADS. For SECONDS, THREADS threads
each start a run of the `heavy` definition and ask queries of the runs started so far,
as fast as the server answers. Prints, as JSON, its requests by status and how many
runs it started.
"""

from __future__ import annotations

import collections
import json
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

    def flood(n: int) -> None:
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}) as api:
            i = 0
            while time.monotonic() < stop:
                if i % 20 == 0:
                    got = api.post("/v1/runs", json={"workflow": "heavy", "input": heavy})
                    if got.status_code == 201:
                        with lock:
                            runs.append(got.json()["run_id"])
                else:
                    with lock:
                        run_id = runs[i % len(runs)] if runs else None
                    if run_id is None:
                        i += 1
                        continue
                    got = api.post(
                        f"/v1/runs/{run_id}/queries/data", json={"args": []}, timeout=120
                    )
                with lock:
                    statuses[got.status_code] += 1
                i += 1

    workers = [threading.Thread(target=flood, args=(n,)) for n in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    print(json.dumps({"statuses": dict(statuses), "runs": len(runs)}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4]))
