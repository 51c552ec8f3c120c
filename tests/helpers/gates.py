"""Gates that hold a test's activities until the test lets them go.

`gate(label)` is one event per label, shared by every test in the process: labels are
unique per test (a uuid), so tests never open each other's gates. `Gate` counts the
activities held at it, per key, for tests of concurrency limits.
"""

from __future__ import annotations

import threading
import time
from typing import Any, TypeVar

T = TypeVar("T")

_lock = threading.Lock()
_gates: dict[str, threading.Event] = {}


def gate(label: str) -> threading.Event:
    """The event named `label`, made on first use."""
    with _lock:
        return _gates.setdefault(label, threading.Event())


def pass_gate(label: str, timeout: float = 30.0) -> None:
    """In an activity: open the gate `{label}-started` for the test, then wait until the
    test opens the gate `label`; fail the attempt if it never does."""
    gate(f"{label}-started").set()
    if not gate(label).wait(timeout):
        raise RuntimeError("the test never opened the gate")


class Gate:
    """What gated activities share: how many run at once (the most seen, in all and per
    key), the order and the times they started in, and a gate they wait at."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        """Forget every count and close the gate, for the next test."""
        with self.lock:
            self.running: dict[str, int] = {}
            self.most: dict[str, int] = {}
            self.started: list[Any] = []
            self.times: list[float] = []
            # A new event: an attempt left over from an earlier test waits on the old one.
            self.open = threading.Event()

    def enter(self, n: Any, key: str = "") -> None:
        with self.lock:
            for k in {"", key}:
                self.running[k] = self.running.get(k, 0) + 1
                self.most[k] = max(self.most.get(k, 0), self.running[k])
            self.started.append(n)
            self.times.append(time.time())

    def leave(self, key: str = "") -> None:
        with self.lock:
            for k in {"", key}:
                self.running[k] = self.running.get(k, 0) - 1

    def hold(self, n: T, key: str = "") -> T:
        """An activity's whole stay: enter, wait for the gate to open (30 s at most),
        leave; `n` back."""
        self.enter(n, key)
        try:
            self.open.wait(30)
            return n
        finally:
            self.leave(key)

    def now(self, key: str = "") -> int:
        """How many run now (under `key`; all of them by default)."""
        with self.lock:
            return self.running.get(key, 0)

    def highest(self, key: str = "") -> int:
        """The most that ever ran at once (under `key`; all of them by default)."""
        with self.lock:
            return self.most.get(key, 0)

    def now_per_key(self) -> dict[str, int]:
        """How many of each key run now (those entered without a key left out)."""
        with self.lock:
            return {k: n for k, n in self.running.items() if k}

    def most_per_key(self) -> dict[str, int]:
        """The most of each key that ever ran at once."""
        with self.lock:
            return {k: n for k, n in self.most.items() if k}
