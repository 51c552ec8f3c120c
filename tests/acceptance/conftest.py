"""Fixtures several acceptance modules share."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest


@pytest.fixture
def workers() -> Iterator[list[subprocess.Popen[bytes]]]:
    """The worker processes a test starts; any still running at its end are killed."""
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(30)
