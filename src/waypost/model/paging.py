"""Cursors of run pages: a position in the newest-first order, opaque to callers.

A page of runs ends at its last run's (created_at, run_id); the next page is
the runs strictly after that position. The cursor carries that position and
nothing else (no tenant, no filter): used by another tenant it positions that
tenant's own listing and shows nothing of the runs it came from. It is
text a caller hands back, so it is read as outside input: bounded, of one
shape, and refused as `InvalidRequest` (field "cursor") otherwise.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from dataclasses import dataclass
from typing import Any

from waypost.errors import InvalidRequest
from waypost.model.identity import check_id

MAX_CURSOR = 2048
_PREFIX = "r1."
_BASE64URL = re.compile(r"[A-Za-z0-9_-]+")


@dataclass(frozen=True)
class RunCursor:
    """A position: runs after it are older, or as old with a smaller run id."""

    created_at: float
    run_id: str

    def encode(self) -> str:
        text = json.dumps([self.created_at, self.run_id], separators=(",", ":"))
        return _PREFIX + base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def decode_cursor(value: Any) -> RunCursor:
    """The position a cursor of `encode` stands for; `InvalidRequest` for anything else."""
    if not isinstance(value, str):
        raise _bad(f"must be a string, not {type(value).__name__}")
    if len(value) > MAX_CURSOR:
        raise _bad(f"is {len(value)} characters long, at most {MAX_CURSOR}")
    body = value.removeprefix(_PREFIX)
    if body == value or not _BASE64URL.fullmatch(body):
        raise _bad("is not one this API gave out")
    try:
        raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
        data = json.loads(raw.decode("utf-8"))
    except (binascii.Error, UnicodeDecodeError, ValueError, RecursionError):
        raise _bad("is not one this API gave out") from None
    if (
        not isinstance(data, list)
        or len(data) != 2
        or isinstance(data[0], bool)
        or not isinstance(data[0], int | float)
        or not isinstance(data[1], str)
    ):
        raise _bad("is not one this API gave out")
    try:
        created_at = float(data[0])
    except OverflowError:
        raise _bad("is not one this API gave out") from None
    if not math.isfinite(created_at):
        raise _bad("is not one this API gave out")
    try:
        run_id = check_id(data[1], "cursor")
    except InvalidRequest:
        raise _bad("is not one this API gave out") from None
    return RunCursor(created_at, run_id)


def _bad(why: str) -> InvalidRequest:
    # The cursor itself is never quoted: it is opaque, and may be long.
    return InvalidRequest(f"cursor {why}; use next_cursor from the previous page", field="cursor")
