"""waypost against its closest embedded peer (DBOS Transact), side by side, same invocation.

The same workload on both: N workflows of 20 no-op steps, one after another and all at
once, on the same store type with the same durability (SQLite: one file in WAL mode
with `synchronous=FULL`; PostgreSQL: the server's `synchronous_commit`, on), each run on
a fresh database. Prints one table (wf/s of each, the ratio) and, with `--json`, the
figures of every run.

    bench/peer-env                                   # once: bench/.peer-venv with DBOS
    .venv/bin/python bench/peer.py                   # SQLite, n=100, median of 3
    .venv/bin/python bench/peer.py --db postgresql://postgres@127.0.0.1:5432/postgres
    .venv/bin/python bench/peer.py --all --json out.json      # both stores (what bench/suite runs)

Every measurement is a process of its own: waypost's side runs `bench.py`'s in-process
engine with this interpreter, the peer's side runs `peer_dbos.py` with the peer venv's
interpreter (DBOS is never a dependency of waypost). The two sides alternate which goes
first from one repeat to the next, so a drift of the machine's load does not favour one.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PEER_PYTHON = HERE / ".peer-venv" / "bin" / "python"
DEFAULT_PG = "postgresql://postgres@127.0.0.1:5432/postgres"
STEPS = 20


@contextmanager
def fresh_database(db: str, folder: str, label: str) -> Iterator[str]:
    """A new SQLite file, or a new database on the PostgreSQL server (dropped afterwards)."""
    if db == "sqlite":
        yield f"{folder}/{label}.db"
        return
    sys.path.insert(0, str(HERE))
    from bench import fresh_database as pg_database

    with pg_database(db, folder, label, "full") as url:
        yield url


def waypost_side(target: str, mode: str, activity: str, n: int) -> dict[str, Any]:
    """Run in a subprocess: bench.py's in-process engine on `target`."""
    sys.path.insert(0, str(HERE))
    from importlib import metadata

    from bench import in_process

    url = f"sqlite:///{target}?synchronous=full" if target.startswith("/") else target
    res = asyncio.run(in_process(url, mode, activity, n, concurrency=n))
    if target.startswith("/"):
        conn = sqlite3.connect(target)
        found = {
            "journal_mode": conn.execute("PRAGMA journal_mode").fetchone()[0],
            "synchronous": "full (the URL's ?synchronous=full)",
        }
        conn.close()
    else:
        import psycopg

        with psycopg.connect(target) as conn:
            row = conn.execute("SHOW synchronous_commit").fetchone()
        found = {"synchronous_commit": row[0] if row else "?"}
    return {
        "engine": f"waypost {metadata.version('waypost')}",
        "n": n,
        "seconds": res.seconds,
        "cpu": res.cpu,
        "commits": res.commits,
        "settings": found,
    }


def run_side(side: str, target: str, mode: str, activity: str, n: int) -> dict[str, Any]:
    if side == "waypost":
        cmd = [sys.executable, str(Path(__file__).resolve()), "--side", "waypost"]
    else:
        if not PEER_PYTHON.exists():
            sys.exit(f"{PEER_PYTHON} is missing: run bench/peer-env first")
        url = f"sqlite:///{target}" if target.startswith("/") else target
        cmd = [str(PEER_PYTHON), str(HERE / "peer_dbos.py"), "--url", url]
        target = ""
    cmd += ["--mode", mode, "--activity", activity, "--n", str(n)]
    if target:
        cmd += ["--target", target]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        sys.exit(f"{side} failed ({' '.join(cmd)}):\n{out.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return sorted(runs, key=lambda r: r["seconds"])[len(runs) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", default="sqlite", help="'sqlite' or a PostgreSQL server URL")
    parser.add_argument("--all", action="store_true", help="SQLite, then PostgreSQL (--pg)")
    parser.add_argument("--pg", default=DEFAULT_PG, help="the PostgreSQL server for --all")
    parser.add_argument("--peer", choices=["dbos"], default="dbos")
    parser.add_argument("--n", type=int, default=100, help="workflows per run")
    parser.add_argument("--repeat", type=int, default=3, help="runs per row; the median is shown")
    parser.add_argument("--activity", choices=["async", "sync"], default="async")
    parser.add_argument("--mode", choices=["sequential", "concurrent", "both"], default="both")
    parser.add_argument("--json", help="write every run's figures to this file")
    parser.add_argument("--side", choices=["waypost"], help=argparse.SUPPRESS)
    parser.add_argument("--target", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        print(json.dumps(waypost_side(args.target, args.mode, args.activity, args.n)))
        return

    stores = ["sqlite", args.pg] if args.all else [args.db]
    modes = ["sequential", "concurrent"] if args.mode == "both" else [args.mode]
    sides = ["waypost", args.peer]
    load0 = os.getloadavg()
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, SQLite {sqlite3.sqlite_version}, load average "
        f"{load0[0]:.2f} at the start"
    )
    print(
        f"{args.n} workflows x {STEPS} no-op {args.activity} steps per run, a fresh database "
        f"each, median of {args.repeat} runs (sides alternating)\n"
    )
    header = (
        f"{'store':<10} {'mode':<11} {'waypost wf/s':>12} {args.peer + ' wf/s':>10} "
        f"{'ratio':>6} {'waypost cpu/step':>16} {args.peer + ' cpu/step':>14}"
    )
    print(header)
    print("-" * len(header))
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="waypost-peer-") as folder:
        for db in stores:
            store = "SQLite" if db == "sqlite" else "PostgreSQL"
            for mode in modes:
                runs: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
                for i in range(args.repeat):
                    for side in sides if i % 2 == 0 else sides[::-1]:
                        label = f"{side}-{mode}-{i}"
                        with fresh_database(db, folder, label) as target:
                            runs[side].append(run_side(side, target, mode, args.activity, args.n))
                med = {side: median_run(runs[side]) for side in sides}
                wfs = {side: med[side]["n"] / med[side]["seconds"] for side in sides}
                cpu = {side: med[side]["cpu"] / (med[side]["n"] * STEPS) * 1e6 for side in sides}
                ratio = wfs["waypost"] / wfs[args.peer]
                label = "one by one" if mode == "sequential" else "all at once"
                print(
                    f"{store:<10} {label:<11} {wfs['waypost']:>12.1f} {wfs[args.peer]:>10.1f} "
                    f"{ratio:>5.1f}x {cpu['waypost']:>13.0f} us {cpu[args.peer]:>11.0f} us",
                    flush=True,
                )
                rows.append(
                    {
                        "store": store,
                        "mode": mode,
                        "activity": args.activity,
                        "n": args.n,
                        "wf_per_s": wfs,
                        "ratio": ratio,
                        "cpu_per_step_us": cpu,
                        "runs": runs,
                    }
                )
    load1 = os.getloadavg()
    print(f"\nload average {load1[0]:.2f} at the end")
    if args.json:
        report = {
            "measured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "machine": {
                "arch": platform.machine(),
                "cores": os.cpu_count(),
                "python": platform.python_version(),
                "sqlite": sqlite3.sqlite_version,
                "load_average": {"start": load0, "end": load1},
            },
            "repeat": args.repeat,
            "median_wf_per_s": {
                f"{r['store']}/{r['mode']}": {**r["wf_per_s"], "ratio": r["ratio"]} for r in rows
            },
            "rows": rows,
        }
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
