"""The SQLite database on disk: where it may be, created private, its mode looked at.

Whatever the path given, opening it either works or raises a `WaypostError` that says
which path and why (`ConfigurationError` for a path that cannot hold the database: a
missing or read-only folder, no permission, a directory or device in its place, a
name too long; `StoreError` for a failing disk), never a bare `OSError`.

A new file is created for its owner only (0600), and SQLite gives the -wal and -shm
files it makes the database file's mode. A file that exists keeps its mode, which
waypost does not change behind its owner's back (a group may be meant to read it, say
a backup job's); if others than its owner may read or write it, the engine logs a
warning at every open naming the file, its mode and the fix.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat

from waypost.errors import ConfigurationError, StoreError, WaypostError
from waypost.model.logs import logger, warn_once

log = logger("waypost.sqlite")

# What the path cannot do, as said to whoever gave it: a setting to fix, not an outage.
_PATH_PROBLEMS = {
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EROFS: "the file system is read-only",
    errno.ENOENT: "its folder cannot hold files (a virtual file system such as /proc or /sys?)",
    errno.ENOTDIR: "a part of the path is not a folder",
    errno.EISDIR: "it is a folder",
    errno.ENAMETOOLONG: "the name is too long",
    errno.ELOOP: "too many symbolic links in the path",
    errno.EINVAL: "the file system does not accept this name",
    errno.ENXIO: "it is a device or socket without a reader",
}


def prepare_file(path: str) -> None:
    """Make sure the database file at `path` exists (created for its owner only) and can
    be one; warn if others may read it. Raises `ConfigurationError` or `StoreError`
    naming the path and the reason."""
    try:
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder):
            raise ConfigurationError(
                f"the folder of the SQLite file {path!r} does not exist (or is not a folder)"
            )
        _refuse_what_is_not_a_file(path)
        create_private(path)
        warn_if_shared(path)
    except WaypostError:
        raise
    except OSError as exc:
        raise path_error(path, exc) from exc


def path_error(path: str, exc: OSError) -> WaypostError:
    """The waypost error for an `OSError` met on the database file at `path`."""
    why = _PATH_PROBLEMS.get(exc.errno or 0)
    if why is not None:
        return ConfigurationError(f"cannot create or open the SQLite file {path!r}: {why}")
    reason = exc.strerror or type(exc).__name__
    return StoreError(f"cannot create or open the SQLite file {path!r}: {reason}")


def _refuse_what_is_not_a_file(path: str) -> None:
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISLNK(mode):
        return  # refused by create_private, with its own words
    if stat.S_ISDIR(mode):
        raise ConfigurationError(f"the SQLite file {path!r} is a folder, not a file")
    if not stat.S_ISREG(mode):
        raise ConfigurationError(
            f"the SQLite file {path!r} is not a regular file (a device, a pipe or a socket)"
        )


def create_private(path: str) -> None:
    """Create the database file for its owner only (0600) unless it exists; refuse symlinks.

    SQLite gives the -wal and -shm files it creates the database file's mode, so
    they are owner-only too. A symbolic link in place of any of them is refused
    rather than followed: it could send the data (or SQLite's writes) elsewhere.
    An existing file keeps its mode.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    with contextlib.suppress(FileExistsError):  # there already (or made meanwhile)
        os.close(os.open(path, flags, 0o600))
    for name in (path, f"{path}-wal", f"{path}-shm", f"{path}-journal"):
        if os.path.islink(name):
            raise ConfigurationError(
                f"{name!r} is a symbolic link; waypost does not follow links to its "
                "database files: name the file itself"
            )


def warn_if_shared(path: str) -> list[str]:
    """Log a warning (once per process) if others than its owner may read or write the
    database file or its -wal and -shm files; the files it named (with their modes)."""
    shared = []
    for name in (path, f"{path}-wal", f"{path}-shm"):
        try:
            mode = stat.S_IMODE(os.stat(name).st_mode)
        except FileNotFoundError:
            continue
        if mode & 0o077:
            shared.append(f"{name} ({mode:04o})")
    if shared:
        warn_once(
            log,
            "the SQLite database holds histories, payloads and credential hashes, and others "
            "than its owner may read or write %s: chmod 600 the file and its -wal and -shm "
            "files (SQLite gives new -wal and -shm files the database file's mode)",
            ", ".join(shared),
        )
    return shared
