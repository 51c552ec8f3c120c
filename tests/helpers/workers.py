"""Worker processes: started from the repository, stopped at a block's end; what they log
about their attempts, and how many overlapped."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

REPO = Path(__file__).resolve().parents[2]
ACCEPTANCE = REPO / "tests" / "acceptance"  # the apps the acceptance tests serve


def worker_process(db_url: str, app: str, log: IO[Any], *options: str) -> subprocess.Popen[bytes]:
    """`waypost worker` serving the workflows of module `app`, its output into `log`."""
    command = [sys.executable, "-m", "waypost.cli", "worker", "--db", db_url, "--app", app]
    return subprocess.Popen([*command, *options], cwd=REPO, stdout=log, stderr=subprocess.STDOUT)


def waypost_command() -> list[str]:
    """How to run `waypost`: its script beside this Python, else the module."""
    script = Path(sys.executable).with_name("waypost")
    return [str(script)] if script.exists() else [sys.executable, "-m", "waypost.cli"]


def acceptance_env(**extra: str) -> dict[str, str]:
    """The test's environment with the acceptance apps first on PYTHONPATH, and `extra`."""
    env = dict(os.environ)
    path = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ACCEPTANCE), path) if p)
    return {**env, **extra}


def quiet_worker(
    options: list[str], env: dict[str, str], stderr: Path, within: Sequence[str] = ()
) -> subprocess.Popen[bytes]:
    """`waypost worker` with `options`: no input, its output dropped, its errors in `stderr`;
    run by the command `within` (`ip netns exec NS`) when given."""
    with open(stderr, "wb") as err:
        return subprocess.Popen(
            [*within, *waypost_command(), "worker", *options],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )


@contextmanager
def signalled_at_the_end(
    worker: subprocess.Popen[Any], sig: int = signal.SIGKILL, wait: float = 10
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


def complete_lines(path: Path) -> list[dict[str, Any]]:
    """The JSON lines of a log that processes append to, up to its last newline (a line
    being written is left out)."""
    if not path.exists():
        return []
    text = path.read_text()
    return [json.loads(line) for line in text[: text.rfind("\n") + 1].splitlines()]


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


def start_app_workers(
    workers: list[subprocess.Popen[bytes]],
    db_url: str,
    app: str,
    log: tuple[str, Path],
    lease: float,
    extras: list[list[str]],
    stderr_dir: Path,
) -> None:
    """Start a `waypost worker` serving the acceptance app `app` for each of `extras` (its
    own options), appended to `workers` as it starts; `log` is the environment variable
    that names the app's log, and the log. Worker i writes its errors to `worker-i.stderr`."""
    env = acceptance_env(**{log[0]: str(log[1])})
    env.pop("WAYPOST_DB", None)
    base = [*waypost_command(), "worker", "--db", db_url, "--app", app, "--lease", str(lease)]
    for i, extra in enumerate(extras):
        with open(stderr_dir / f"worker-{i}.stderr", "wb") as err:
            workers.append(subprocess.Popen([*base, *extra], stderr=err, env=env))


def stopped_at_once(out: str) -> None:
    """`out`, what a process stopped by a second Ctrl-C printed, says so as it should:
    one "stopping:" line, "stopped at once" last, no traceback."""
    assert "Traceback" not in out, out
    assert out.count("stopping:") == 1, out
    assert "stopped at once" in out.splitlines()[-1], out
