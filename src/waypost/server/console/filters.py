"""Jinja filters and helpers of the console: times, durations, data, errors and waits in
plain form."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

import jinja2

from . import history


def when(value: datetime | float | None) -> str:
    if value is None:
        return "—"
    if isinstance(value, int | float):
        value = datetime.fromtimestamp(value, UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def duration(value: timedelta | float | None) -> str:
    if value is None:
        return ""
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def pretty(value: Any, limit: int = 20_000) -> str:
    text = json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)
    return text if len(text) <= limit else text[:limit] + f"\n… ({len(text)} characters)"


def segment(value: object) -> str:
    """`value` as one segment of a URL's path: every `/` encoded too (`%2F`), which
    Jinja's `urlencode` leaves as it is (the server reads it back: `server/paths.py`)."""
    return quote(str(value), safe="")


def install(env: jinja2.Environment) -> None:
    env.filters["segment"] = segment
    env.filters["when"] = when
    env.filters["duration"] = duration
    env.filters["pretty"] = pretty
    env.globals["error_words"] = history.error_words
    env.globals["error_site"] = history.error_site
    env.globals["next_words"] = history.next_words
    env.globals["waiting_words"] = history.waiting_words
