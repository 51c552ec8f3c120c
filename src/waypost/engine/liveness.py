"""Telling a dead engine from a slow one, so a crash costs seconds and not a lease.

Each serving engine holds an exclusive lock on a file of its own (under the
system's temporary folder, one folder per user) for as long as its process
lives; the kernel drops the lock when the process dies, however it dies. An
engine on the same host that can take that lock knows its owner is gone:
that engine's leases are released at once. A stopped process (SIGSTOP, a VM
pause) keeps its lock, so it is not taken for dead; when it wakes, the fences
of whatever was taken from it meanwhile keep its late results out.

Across hosts, where no lock can be seen, an engine whose heartbeat in the
`workers` table is older than `WORKER_TTL` is taken for dead — but only by an
engine that has itself been beating without failure for that long, so that a
database outage that silenced everyone makes nobody dead.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import tempfile

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def _folder() -> str:
    return os.path.join(tempfile.gettempdir(), f"waypost-{os.getuid()}", "engines")


def _path(owner: str) -> str:
    return os.path.join(_folder(), _UNSAFE.sub("_", owner)[:200] + ".lock")


class LifeLock:
    """The lock this engine holds while it serves (see the module)."""

    def __init__(self, owner: str) -> None:
        self.owner = owner
        self._fd: int | None = None

    def hold(self) -> None:
        """Take the lock (before this engine announces itself in the workers table)."""
        if self._fd is not None:
            return
        folder = _folder()
        with contextlib.suppress(OSError):
            os.makedirs(folder, mode=0o700, exist_ok=True)
        try:
            fd = os.open(_path(self.owner), os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW, 0o600)
        except OSError:
            return  # no lock: other engines fall back on the heartbeat
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return
        self._fd = fd

    def drop(self, *, remove: bool) -> None:
        """Let the lock go: on a clean stop (`remove`), or as a crash would."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        if remove:
            with contextlib.suppress(OSError):
                os.unlink(_path(self.owner))
        os.close(fd)


def gone(owner: str) -> bool | None:
    """Whether the engine `owner` of this host is known dead (None: cannot tell)."""
    path = _path(owner)
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW)
    except OSError:
        return None  # another user's, another host's (same name), or never locked
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False  # held: the owner lives (or is stopped)
    else:
        with contextlib.suppress(OSError):
            os.unlink(path)
        return True
    finally:
        os.close(fd)
