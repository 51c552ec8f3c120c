"""Worker processes: started from the repository, stopped at a block's end; what they log
about their attempts, and how many overlapped."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

REPO = Path(__file__).resolve().parents[2]


def worker_process(db_url: str, app: str, log: IO[Any], *options: str) -> subprocess.Popen[bytes]:
    """`waypost worker` serving the workflows of module `app`, its output into `log`."""
    command = [sys.executable, "-m", "waypost.cli", "worker", "--db", db_url, "--app", app]
    return subprocess.Popen([*command, *options], cwd=REPO, stdout=log, stderr=subprocess.STDOUT)


@contextmanager
def signalled_at_the_end(
    worker: subprocess.Popen[bytes], sig: int = signal.SIGKILL, wait: float = 10
) -> Iterator[None]:
    """Send `sig` to `worker` when the block ends and wait up to `wait` seconds for it to
    exit; kill it if it is still alive then, or if the block failed."""
    try:
        yield
        worker.send_signal(sig)
        worker.wait(wait)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(10)


def json_lines(path: Path) -> list[dict[str, Any]]:
    """The whole JSON lines of a log that processes append to (a line being written is
    left out)."""
    if not path.exists():
        return []
    lines = path.read_text().splitlines()
    return [json.loads(line) for line in lines if line.endswith("}")]


def most_at_once(intervals: list[tuple[float, float]]) -> int:
    """The most of these (start, end) intervals that overlap at one moment."""
    moments = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    running = most = 0
    for _, step in moments:  # at one instant an end (-1) sorts before a start (+1)
        running += step
        most = max(most, running)
    return most
