"""What a hostile request must get back: a short, typed refusal, and no row written."""

from __future__ import annotations

from typing import Any

from .db import db_query

MAX_MESSAGE = 2_000  # characters of an error's message, whatever was sent


def rows_in(db_url: str, tables: tuple[str, ...]) -> dict[str, int]:
    """How many rows each of these tables holds."""
    return {t: db_query(db_url, f"SELECT count(*) FROM {t}")[0][0] for t in tables}


def assert_refused(answer: Any, what: str) -> None:
    """`answer` is a 4xx with a short error message and a code that is not a catch-all."""
    assert 400 <= answer.status_code < 500, (what, answer.status_code, answer.text[:300])
    body = answer.json()
    message = body["error"]["message"]
    assert isinstance(message, str) and message, what
    assert len(message) <= MAX_MESSAGE, (what, len(message))
    assert len(answer.content) < 20_000, (what, len(answer.content))
    assert body["error"]["code"] not in ("http_error", "internal"), (what, body)
