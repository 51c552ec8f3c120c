"""Where a step's time goes: py-spy over the 20-step workflow, and statements per step.

    .venv/bin/python bench/profile_steps.py                               # SQLite, 300 one after another
    .venv/bin/python bench/profile_steps.py --mode concurrent
    .venv/bin/python bench/profile_steps.py --db postgresql://postgres@127.0.0.1:5432/postgres
    .venv/bin/python bench/profile_steps.py --db postgresql://... --statements   # count statements

The engine runs in this process (as `bench.py` with `--workers 0`), on a fresh database.
After a warm-up workflow, py-spy (the `bench` extra, run as root or with ptrace allowed)
attaches to this process and samples it at `--rate` Hz while N workflows run, then the
collapsed stacks are summed up. py-spy samples only the thread holding the GIL
(`--gil`): the Python-level work, without the time a thread spends in fsync or waiting
on the network with the GIL released. The stacks are summed up: the share of samples by the innermost frame ("self"), by
every function on the stack ("inclusive") and by area (the database client, JSON,
hashing, asyncio, and waypost's rooms).

With `--statements` (PostgreSQL) no profiler runs; the fresh database gets
`log_statement = 'all'` and the statements of the measured workflows are counted from the
server's log (`--server-log`): statements per step and per transaction by kind, and the
database's committed transactions (`pg_stat_database.xact_commit`). Each statement is
one round trip from the engine (psycopg sends no pipeline here), as are BEGIN and COMMIT;
the benchmark's own counting query (concurrent mode) is left out. With `--peer` the same
is counted for DBOS, in bench/.peer-venv.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bench  # noqa: E402
from workflows import STEPS, bench20, noop_async, noop_sync  # noqa: E402

import waypost as wp  # noqa: E402

# Areas by the innermost frame. py-spy (without --native) counts the time in C code to
# the Python frame that called it: a statement's execution shows as `Tx.run` and the like.
AREAS = [
    ("SQL statements (driver + database, in C)", re.compile(r"^Tx\.(run|one|all|many) ")),
    ("BEGIN / COMMIT (SQLite)", re.compile(r"^run_batch ")),
    ("psycopg (Python side)", re.compile(r"psycopg")),
    ("JSON", re.compile(r"\(json/")),
    ("hashing the chain", re.compile(r"hashlib|hmac|\(model/chain")),
    ("dataclass construction", re.compile(r"^__create_fn__")),
    ("asyncio and threads", re.compile(r"\(asyncio/|threading\.py|concurrent/futures|selectors")),
    ("waypost store (Python)", re.compile(r"\(store/")),
    ("waypost runtime (replay)", re.compile(r"\(runtime/")),
    ("waypost engine", re.compile(r"\(engine/")),
    ("waypost model", re.compile(r"\(model/")),
    ("waypost client / features", re.compile(r"\((client|features|observability)/")),
]


def frames_of(line: str) -> tuple[list[str], int]:
    stack, _, count = line.rstrip("\n").rpartition(" ")
    return [f for f in stack.split(";") if f], int(count)


def short(frame: str) -> str:
    """`func (path/to/file.py:12)` -> `func (file.py)` so lines of one function add up."""
    m = re.match(r"(.*) \((.*?):\d+\)$", frame)
    if not m:
        return frame
    path = m.group(2)
    for marker in ("/waypost/", "/lib/python3.11/"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    path = path.removeprefix("waypost/")  # py-spy shortens paths on sys.path
    return f"{m.group(1)} ({path})"


def summarize(raw: Path, steps: int, cpu: float, top: int) -> None:
    self_count: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    areas: Counter[str] = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        if not line.strip():
            continue
        frames, count = frames_of(line)
        frames = [f for f in frames if "(" in f]  # drop process/thread labels
        if not frames:
            continue
        total += count
        self_count[short(frames[-1])] += count
        for f in set(map(short, frames)):
            incl[f] += count
        leaf = short(frames[-1])
        for name, pattern in AREAS:
            if pattern.search(leaf):
                areas[name] += count
                break
        else:
            areas["other (" + leaf.split(" (")[-1].rstrip(")") + ")"] += count
    per_step = cpu / steps * 1e6
    print(f"\n{total} samples; process CPU {per_step:.0f} us per step ({steps} steps)\n")
    print("by area (innermost frame), share of samples (the GIL held):")
    for name, n in areas.most_common(16):
        print(f"  {n / total:6.1%}  {name}")
    print(f"\nself (innermost frame), top {top}:")
    for name, n in self_count.most_common(top):
        print(f"  {n / total:6.1%}  {name}")
    print(f"\ninclusive (on the stack), top {top}:")
    for name, n in incl.most_common(top):
        print(f"  {n / total:6.1%}  {name}")


def py_spy() -> str:
    found = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(found).exists():
        sys.exit("py-spy is missing: install the `bench` extra (pip install -e '.[bench]')")
    return found


def start_spy(raw: Path, rate: int) -> subprocess.Popen[bytes]:
    """py-spy sampling this process from now on, the thread holding the GIL only."""
    return subprocess.Popen(
        [
            py_spy(),
            "record",
            *("--pid", str(os.getpid()), "--rate", str(rate)),
            *("--format", "raw", "--output", str(raw), "--nonblocking", "--gil"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def stop_spy(spy: subprocess.Popen[bytes], raw: Path) -> None:
    spy.send_signal(signal.SIGINT)
    _, err = spy.communicate(timeout=60)
    if spy.returncode not in (0, -signal.SIGINT) or not raw.exists():
        sys.exit(f"py-spy failed: {err.decode()[-2000:]}")


async def workload(url: str, mode: str, kind: str, n: int, raw: Path | None, rate: int) -> float:
    """Run N workflows after a warm-up, py-spy attached (when `raw`); the CPU seconds."""
    async with wp.AsyncEngine(url, max_activities=max(100, n)) as engine:
        engine.register(bench20, noop_sync, noop_async)
        async with engine.running():
            await (await engine.start(bench20, kind)).result(timeout=60)
            spy = start_spy(raw, rate) if raw is not None else None
            if spy is not None:
                await asyncio.sleep(1.0)  # py-spy attaches
            cpu0 = bench.own_cpu()
            await bench.drive(engine, url, mode, kind, n, concurrency=n, warm=1)
            cpu = bench.own_cpu() - cpu0
            if spy is not None and raw is not None:
                stop_spy(spy, raw)
    return cpu


def statement_kind(sql: str) -> str:
    """`INSERT events`, `SELECT tasks`, `BEGIN`: the verb and the first table named."""
    lines = [line for line in sql.splitlines() if not line.strip().startswith("--")]
    words = " ".join(lines).replace("(", " ( ").replace(")", " ) ").split()
    if not words:
        return "?"
    head = words[0].upper()
    marker = {"INSERT": "INTO", "UPDATE": "UPDATE"}.get(head, "FROM")
    depth = 0  # the statement's own table, not a subquery's
    for word, following in zip(words, [*words[1:], ""], strict=True):
        depth += {"(": 1, ")": -1}.get(word, 0)
        if depth == 0 and word.upper() == marker and following:
            return f"{head} {following.strip(',;')}"
    return head


def count_statements(log: Path, offset: int, dbname: str) -> Counter[str]:
    """Statements logged for `dbname` after `offset` bytes of the server's log (an entry's
    SQL goes on over the lines that follow it, each led by a tab)."""
    entry = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+ \w+ \[\d+\] (\S*)@(\S*) LOG:  (.*)$")
    with log.open("rb") as f:
        f.seek(offset)
        text = f.read().decode(errors="replace")
    found: list[str] = []
    current: list[str] | None = None
    for line in text.splitlines():
        m = entry.match(line)
        if m:
            current = None
            sm = re.match(r"(?:statement|execute [^:]*): (.*)", m.group(3))
            if m.group(2) == dbname and sm:
                current = [sm.group(1)]
                found.append("")
        elif current is not None and line.startswith("\t"):
            current.append(line[1:])
        if current is not None:
            found[-1] = "\n".join(current)
    counting = "count(*) FROM runs WHERE status = 'completed'"  # the benchmark's own query
    return Counter(statement_kind(sql) for sql in found if counting not in sql)


def log_size(log: Path) -> int:
    return log.stat().st_size


def statements(db: str, mode: str, kind: str, n: int, log: Path) -> None:
    import psycopg

    with (
        tempfile.TemporaryDirectory() as folder,
        bench.fresh_database(db, folder, "statements", "full") as url,
    ):
        dbname = url.rsplit("/", 1)[1]
        with psycopg.connect(db, autocommit=True) as admin:
            admin.execute(f"ALTER DATABASE \"{dbname}\" SET log_statement = 'all'")

        async def go() -> tuple[int, int]:
            async with wp.AsyncEngine(url, max_activities=max(100, n)) as engine:
                engine.register(bench20, noop_sync, noop_async)
                async with engine.running():
                    await (await engine.start(bench20, kind)).result(timeout=60)
                    await asyncio.sleep(0.5)
                    offset = log_size(log)
                    xact0 = commits(db, dbname)
                    await bench.drive(engine, url, mode, kind, n, concurrency=n, warm=1)
                    xact = commits(db, dbname) - xact0
            return offset, xact

        offset, xact = asyncio.run(go())
        time.sleep(0.5)  # the server's logger
        kinds = count_statements(log, offset, dbname)
    report(kinds, xact, n, mode)


def peer_statements(db: str, mode: str, kind: str, n: int, log: Path) -> None:
    """The same count for the peer (DBOS, in bench/.peer-venv): a run of N workflows less a
    run of none (launch and warm-up), each on a fresh database."""
    counted: list[tuple[Counter[str], int]] = []
    for runs in (0, n):
        with (
            tempfile.TemporaryDirectory() as folder,
            bench.fresh_database(db, folder, "peer", "full") as url,
        ):
            dbname = url.rsplit("/", 1)[1]
            import psycopg

            with psycopg.connect(db, autocommit=True) as admin:
                admin.execute(f"ALTER DATABASE \"{dbname}\" SET log_statement = 'all'")
            offset = log.stat().st_size
            xact0 = commits(db, dbname)
            subprocess.run(
                [
                    *(str(HERE / ".peer-venv" / "bin" / "python"), str(HERE / "peer_dbos.py")),
                    *("--url", url, "--mode", mode, "--activity", kind, "--n", str(runs)),
                ],
                check=True,
                capture_output=True,
            )
            xact = commits(db, dbname) - xact0
            time.sleep(0.5)  # the server's logger
            counted.append((count_statements(log, offset, dbname), xact))
    (base, xact0), (full, xact1) = counted
    full.subtract(base)
    report(+full, xact1 - xact0, n, mode)


def report(kinds: Counter[str], xact: int, n: int, mode: str) -> None:
    steps = n * STEPS
    total = sum(kinds.values())
    print(f"\n{n} workflows ({mode}), {steps} steps")
    print(f"statements: {total} ({total / steps:.2f} per step, {total / n:.1f} per workflow)")
    print(f"committed transactions: {xact} ({xact / steps:.2f} per step)")
    print("by kind (per step):")
    for name, c in kinds.most_common():
        print(f"  {c / steps:6.2f}  {c:6d}  {name}")


def commits(db: str, dbname: str) -> int:
    import psycopg

    with psycopg.connect(db, autocommit=True) as admin:
        admin.execute("SELECT pg_stat_clear_snapshot()")
        row = admin.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = %s", (dbname,)
        ).fetchone()
    return int(row[0]) if row else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", default="sqlite", help="'sqlite' or a PostgreSQL server URL")
    parser.add_argument("--n", type=int, default=300, help="workflows measured")
    parser.add_argument("--mode", choices=["sequential", "concurrent"], default="sequential")
    parser.add_argument("--activity", choices=["async", "sync"], default="async")
    parser.add_argument("--rate", type=int, default=250, help="py-spy samples per second")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--raw", help="keep py-spy's collapsed stacks in this file")
    parser.add_argument(
        "--summarize", help="only sum up collapsed stacks kept earlier with --raw (and --cpu)"
    )
    parser.add_argument("--cpu", type=float, default=0.0, help="with --summarize: CPU seconds")
    parser.add_argument("--statements", action="store_true", help="PostgreSQL: count statements")
    parser.add_argument(
        "--peer", action="store_true", help="with --statements: count the peer's (DBOS)"
    )
    parser.add_argument(
        "--server-log",
        default="/var/log/postgresql/postgresql-15-main.log",
        help="the PostgreSQL server's log (for --statements)",
    )
    args = parser.parse_args()
    if args.summarize:
        summarize(Path(args.summarize), args.n * STEPS, args.cpu, args.top)
        return
    if args.statements:
        if args.db == "sqlite":
            sys.exit("--statements counts PostgreSQL statements: give --db postgresql://...")
        count = peer_statements if args.peer else statements
        count(args.db, args.mode, args.activity, args.n, Path(args.server_log))
        return
    with tempfile.TemporaryDirectory(prefix="waypost-profile-") as folder:
        raw = Path(args.raw) if args.raw else Path(folder) / "stacks.txt"
        with bench.fresh_database(args.db, folder, "profile", "full") as url:
            cpu = asyncio.run(workload(url, args.mode, args.activity, args.n, raw, args.rate))
        summarize(raw, args.n * STEPS, cpu, args.top)


if __name__ == "__main__":
    main()
