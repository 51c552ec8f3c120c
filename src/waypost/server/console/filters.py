"""Jinja filters and helpers of the console: times, durations, data, errors and waits in
plain form."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

import jinja2
from markupsafe import Markup

from . import history


def _moment(value: datetime | float) -> datetime:
    if isinstance(value, int | float):
        return datetime.fromtimestamp(value, UTC)
    return value.astimezone(UTC)


def when(value: datetime | float | None) -> str:
    if value is None:
        return "—"
    return _moment(value).strftime("%Y-%m-%d %H:%M:%S UTC")


def relative(moment: datetime, now: datetime) -> str:
    """`moment` from `now` in words: "just now", "3 min ago", "in 2 h", "5 days ago";
    a moment more than 45 days away as its date."""
    seconds = (now - moment).total_seconds()
    away = abs(seconds)
    if away < 45:
        return "just now" if seconds >= 0 else "in a moment"
    if away < 90 * 60:
        amount, unit = round(away / 60), "min"
    elif away < 36 * 3600:
        amount, unit = round(away / 3600), "h"
    elif away < 45 * 86400:
        amount = round(away / 86400)
        unit = "day" if amount == 1 else "days"
    else:
        return moment.strftime("%Y-%m-%d")
    return f"{amount} {unit} ago" if seconds >= 0 else f"in {amount} {unit}"


def ago(value: datetime | float | None, now: datetime | None = None) -> Markup:
    """A time as people read it ("3 min ago"), in a `<time>` whose `datetime` and
    `title` hold the exact UTC time (a pointer's hover shows it)."""
    if value is None:
        return Markup("—")
    moment = _moment(value)
    exact = moment.strftime("%Y-%m-%d %H:%M:%S UTC")
    stamp = moment.strftime("%Y-%m-%dT%H:%M:%SZ")
    words = relative(moment, now or datetime.now(UTC))
    return Markup('<time datetime="{}" title="{}">{}</time>').format(stamp, exact, words)


def took(start: datetime | float | None, end: datetime | float | None) -> str:
    """How long from `start` to `end` ("" when either is unknown)."""
    if start is None or end is None:
        return ""
    return duration(max(0.0, (_moment(end) - _moment(start)).total_seconds()))


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
    env.filters["ago"] = ago
    env.globals["took"] = took
    env.filters["duration"] = duration
    env.filters["pretty"] = pretty
    env.globals["error_words"] = history.error_words
    env.globals["error_site"] = history.error_site
    env.globals["next_words"] = history.next_words
    env.globals["waiting_words"] = history.waiting_words
