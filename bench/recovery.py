"""How long a crash costs: from SIGKILL of the worker running a step until the run moves on.

Default settings (lease 30 s, heartbeat every second, dead after 6 s of silence):

- restart: the only worker process is killed mid-activity and started again at once;
  measured from the kill, and from the new process's start, until the interrupted step
  has run again and the run completed. The new process sees the old one's lock gone.
- takeover: the worker running the step is on "another host" (its own UTS namespace,
  so its lock cannot be seen; needs root for `unshare`) and is killed while a second
  worker keeps running; measured from the kill until the run completed on the second.

    .venv/bin/python bench/recovery.py [--db URL] [--repeat 3]
    .venv/bin/python bench/recovery.py --runs 1000     # 1,000 runs in flight at the kill
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from _db import completed_runs, fresh_postgres

import waypost as wp

WAYPOST = Path(sys.executable).with_name("waypost")
RUNS = 1  # --runs: runs whose step is under way when the worker is killed

APP = textwrap.dedent(
    """
    import asyncio, os
    from datetime import timedelta
    import waypost as wp

    MARK = os.environ["RECOVERY_MARK"]

    @wp.activity(timeout=timedelta(minutes=10), retry=wp.Retry(initial_interval=timedelta(0)))
    async def step(ctx: wp.ActivityContext) -> int:
        if ctx.attempt == 1:
            with open(MARK, "a") as mark:  # a line per first attempt under way
                mark.write("x\\n")
            await asyncio.sleep(600)
        return ctx.attempt

    @wp.workflow(name="recovery")
    async def recovery(ctx: wp.WorkflowContext) -> int:
        return await ctx.run(step)
    """
)


def worker(
    db: str, folder: Path, mark: Path, *, elsewhere: bool = False
) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(folder), "RECOVERY_MARK": str(mark)}
    cmd = [str(WAYPOST), "worker", "--db", db, "--app", "recovery_app"]
    cmd += ["--max-activities", str(max(100, RUNS))]
    if elsewhere:
        script = "hostname elsewhere && exec " + " ".join(cmd)
        cmd = ["unshare", "--uts", "sh", "-c", script]  # one process: SIGKILL reaches it
    return subprocess.Popen(
        cmd, env=env, cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def wait_for(path: Path, lines: int = 1, seconds: float = 120.0) -> None:
    """Until `path` has `lines` lines (that many first attempts are under way)."""
    deadline = time.monotonic() + seconds
    while not path.exists() or path.read_bytes().count(b"\n") < lines:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not get {lines} lines")
        time.sleep(0.005)


def one(db: str, folder: Path, kind: str) -> tuple[float, float]:
    mark = folder / f"mark-{uuid.uuid4().hex[:6]}"
    first = worker(db, folder, mark, elsewhere=kind == "takeover")
    survivor = None
    engine = wp.Engine(db)
    try:
        sys.path.insert(0, str(folder))
        os.environ["RECOVERY_MARK"] = str(mark)
        import recovery_app  # the starting process knows the workflow, as a web process would

        engine.register(recovery_app.recovery)
        runs = [engine.start("recovery", None) for _ in range(RUNS)]
        wait_for(mark, RUNS)
        if kind == "takeover":
            survivor = worker(db, folder, mark)
            time.sleep(7.0)  # the survivor has beaten for longer than the heartbeat's life
        first.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        first.wait()
        if kind == "restart":
            survivor = worker(db, folder, mark)
        started = time.monotonic()
        if RUNS == 1:
            result = runs[0].result(timeout=120)
            assert result == 2, result
        else:  # count finished runs rather than wait on each
            while completed_runs(db) < RUNS:
                if time.monotonic() - started > 300:
                    raise TimeoutError(f"{completed_runs(db)} of {RUNS} runs completed after 300 s")
                time.sleep(0.01)
            assert all(r.result(timeout=60) == 2 for r in runs)
        done = time.monotonic()
        return done - killed, done - started
    finally:
        engine.close()
        for proc in (first, survivor):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                proc.wait(30)


@contextmanager
def fresh_database(db: str, folder: Path, label: str) -> Iterator[str]:
    if db == "sqlite":
        yield f"sqlite:///{folder / f'{label}.db'}"
        return
    with fresh_postgres(db, "waypost_recovery") as url:
        yield url


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", default="sqlite", help="'sqlite' or a PostgreSQL database URL")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--runs", type=int, default=1, help="runs in flight when killed")
    args = parser.parse_args()
    global RUNS
    RUNS = args.runs
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    )
    kinds = ["restart"] + (["takeover"] if shutil.which("unshare") and os.getuid() == 0 else [])
    with tempfile.TemporaryDirectory(prefix="waypost-recovery-") as tmp:
        folder = Path(tmp)
        (folder / "recovery_app.py").write_text(APP)
        for kind in kinds:
            rows = []
            for i in range(args.repeat):
                with fresh_database(args.db, folder, f"{kind}-{i}") as db:
                    rows.append(one(db, folder, kind))
            since_kill = statistics.median(r[0] for r in rows)
            since_start = statistics.median(r[1] for r in rows)
            started = (
                f" (new worker started -> completed {since_start:5.2f} s)"
                if kind == "restart"
                else ""
            )
            print(
                f"{kind:<9} kill -> {RUNS} run(s) completed {since_kill:6.2f} s{started}, "
                f"median of {args.repeat}: {', '.join(f'{r[0]:.2f}' for r in rows)}"
            )


if __name__ == "__main__":
    main()
