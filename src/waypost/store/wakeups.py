"""Wake-ups between processes on one SQLite file: what LISTEN/NOTIFY is on PostgreSQL.

Each engine on the file listens on a Unix datagram socket of its own, in a folder
named after the file's real path (in the system's temporary folder, private to the
user: `waypost-<uid>-<hash>`). A commit that left work for others (a task became
ready, a timer was set, a message waits) sends its topics to every other socket
there once it has committed. A datagram is only a hint: a lost one (a full buffer,
a process that had not bound yet) delays the work until the next poll, never loses
it. A folder that is not this user's alone, or a system without Unix sockets, falls
back to polling with one warning.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import secrets
import socket
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterable

from waypost.model.logs import logger

log = logger("waypost.store")

_PEERS_FRESH = 0.5  # seconds a listing of the folder is used before it is read again


def folder_for(path: str) -> str:
    """The folder of the sockets of the engines on the SQLite file at `path`."""
    digest = hashlib.sha256(os.path.realpath(path).encode()).hexdigest()[:16]
    return os.path.join(tempfile.gettempdir(), f"waypost-{os.getuid()}-{digest}")


def _private_folder(folder: str) -> bool:
    """Make the folder if need be; whether it is a folder of this user's only."""
    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        log.warning("no wake-ups between processes (polling instead): %s", exc)
        return False
    info = os.lstat(folder)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        log.warning(
            "no wake-ups between processes (polling instead): %s is not a folder of this "
            "user's only",
            folder,
        )
        return False
    return True


class Wakeups:
    """This process's side of the wake-ups of one SQLite file."""

    def __init__(self, path: str) -> None:
        self.folder = folder_for(path)
        self._own: str | None = None  # the socket this engine listens on, while it does
        self._sender: socket.socket | None = None
        self._lock = threading.Lock()  # commits come from the loop and the writer thread
        self._peers: list[str] = []
        self._listed_at = float("-inf")

    def send(self, topics: Iterable[str]) -> None:
        """Tell every other engine on the file that `topics` have work (after a commit)."""
        if not hasattr(socket, "AF_UNIX"):
            return
        with self._lock:
            peers = self._peer_paths()
            if not peers:
                return
            if self._sender is None:
                self._sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                self._sender.setblocking(False)
            for topic in set(topics):
                data = topic.encode()
                for peer in peers:
                    try:
                        self._sender.sendto(data, peer)
                    except ConnectionRefusedError:
                        with contextlib.suppress(OSError):
                            os.unlink(peer)  # left by a process that ended without removing it
                        self._listed_at = float("-inf")
                    except FileNotFoundError:
                        self._listed_at = float("-inf")
                    except OSError:
                        pass  # a full buffer: that engine has been woken already

    def _peer_paths(self) -> list[str]:
        now = time.monotonic()
        if now - self._listed_at > _PEERS_FRESH:
            self._listed_at = now
            try:
                names = os.listdir(self.folder)
            except OSError:
                names = []
            own = self._own
            self._peers = [
                p
                for p in (os.path.join(self.folder, n) for n in names if n.endswith(".sock"))
                if p != own
            ]
        return self._peers

    async def listen(self, on_notify: Callable[[str], None]) -> None:
        """Call `on_notify(topic)` for each wake-up another engine on the file sends; runs
        until cancelled (returns at once where wake-ups cannot be had: polling then)."""
        if not hasattr(socket, "AF_UNIX") or not _private_folder(self.folder):
            return
        own = os.path.join(self.folder, f"{os.getpid()}-{secrets.token_hex(4)}.sock")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.setblocking(False)
        try:
            try:
                sock.bind(own)
            except FileNotFoundError:  # the last engine removed the folder meanwhile
                if not _private_folder(self.folder):
                    raise
                sock.bind(own)
        except OSError as exc:
            sock.close()
            log.warning("no wake-ups between processes (polling instead): %s", exc)
            return
        loop = asyncio.get_running_loop()

        def readable() -> None:
            for _ in range(64):
                try:
                    data = sock.recv(64)
                except (BlockingIOError, InterruptedError):
                    return
                except OSError:
                    return
                with contextlib.suppress(UnicodeDecodeError):
                    on_notify(data.decode())

        self._own = own
        self._listed_at = float("-inf")
        loop.add_reader(sock.fileno(), readable)
        try:
            on_notify("reconnected")  # what was sent before this bound is looked for now
            await asyncio.Event().wait()
        finally:
            loop.remove_reader(sock.fileno())
            sock.close()
            self._own = None
            with contextlib.suppress(OSError):
                os.unlink(own)
            with contextlib.suppress(OSError):
                os.rmdir(self.folder)  # the last engine on the file leaves nothing behind

    def close(self) -> None:
        with self._lock:
            if self._sender is not None:
                self._sender.close()
                self._sender = None
