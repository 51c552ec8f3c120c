"""What a test's activities did, recorded under the test's label and read back by it.

One record for the whole process: labels are unique per test (a uuid), so tests never
read each other's calls.
"""

from __future__ import annotations

import threading

_lock = threading.Lock()
_calls: dict[str, list[str]] = {}


def record(label: str, what: str) -> None:
    with _lock:
        _calls.setdefault(label, []).append(what)


def calls_of(label: str) -> list[str]:
    """What was recorded under `label`, in order."""
    with _lock:
        return list(_calls.get(label, []))
