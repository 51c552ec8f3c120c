"""Hosts of a test's own on one machine: each a Linux network namespace joined to the
machine's own namespace (where the database listens) by a veth pair, with addresses
of its own, whose link the test can cut (as a pulled cable or a failed switch port: no
reset reaches either side, the host's connections just hang) and mend.

Needs root (or CAP_NET_ADMIN) and iproute2's `ip` (Debian's iproute2).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

_NET = "10.231"  # host i: 10.231.i.1 (the machine's side) and 10.231.i.2 (the host's)
NETWORK = f"{_NET}.0.0/16"
"""Every host's addresses: what a server must let in."""


def can_make_hosts() -> str | None:
    """Why hosts cannot be made here, or None when they can."""
    if shutil.which("ip") is None:
        return "iproute2's ip is not installed"
    if os.geteuid() != 0:
        return "network namespaces need root"
    probe = f"wpprobe{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"ip netns add failed: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")


@dataclass
class Host:
    """One namespace: `address` is the machine as this host reaches it."""

    index: int
    ns: str
    link: str  # the veth end in the machine's namespace
    cut_now: bool = False

    @property
    def address(self) -> str:
        return f"{_NET}.{self.index}.1"

    def command(self, *cmd: str) -> list[str]:
        """`cmd` run inside this host's namespace."""
        return ["ip", "netns", "exec", self.ns, *cmd]

    def cut(self) -> None:
        """Take the machine's end of the link down: the host's packets go nowhere (its end
        stays up, without a carrier, so its connections hang rather than fail) and the
        machine's to it cannot be sent."""
        _ip("link", "set", self.link, "down")
        self.cut_now = True

    def mend(self) -> None:
        """Bring the link back up (the machine's address and route with it)."""
        _ip("link", "set", self.link, "up")
        self.cut_now = False


@contextlib.contextmanager
def hosts(n: int) -> Iterator[list[Host]]:
    """`n` hosts, removed (with their links) afterwards."""
    tag = os.getpid() % 100_000
    made: list[Host] = []
    try:
        for i in range(1, n + 1):
            host = Host(i, f"wp{tag}h{i}", f"wpv{tag}x{i}")
            _ip("netns", "add", host.ns)
            made.append(host)
            _ip("link", "add", host.link, "type", "veth", "peer", "name", "eth0", "netns", host.ns)
            _ip("addr", "add", f"{host.address}/24", "dev", host.link)
            _ip("link", "set", host.link, "up")
            _ip("-n", host.ns, "addr", "add", f"{_NET}.{i}.2/24", "dev", "eth0")
            _ip("-n", host.ns, "link", "set", "eth0", "up")
            _ip("-n", host.ns, "link", "set", "lo", "up")
        yield made
    finally:
        for host in made:
            with contextlib.suppress(RuntimeError):
                _ip("netns", "del", host.ns)  # takes its end of the link, and so the pair
            with contextlib.suppress(RuntimeError):
                _ip("link", "del", host.link)
