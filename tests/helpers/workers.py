"""What worker processes log about their attempts, and how many overlapped."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


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
