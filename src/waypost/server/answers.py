"""The server's answers as bytes: JSON and HTML whose text may hold a lone surrogate.

A string that came from outside (a run's input, a signal's payload, stored before the
server refused such text, or written by the embedded API) may hold half of a surrogate
pair. It has no UTF-8 form, so the framework's own encoders fail on it and the read
answered 500 — for a whole run list, because of one run. These classes encode such a
code point as the escape `\\udc00` instead: in JSON, where it can only stand inside a
string, that is the JSON escape of the same string (what the store keeps, see
`canonical_json`); in HTML it shows the escape as text. Every other character is
written as itself.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi.responses import HTMLResponse, JSONResponse


class JsonAnswer(JSONResponse):
    """A JSON answer of any strings (a lone surrogate written as its escape)."""

    def render(self, content: Any) -> bytes:
        text = json.dumps(content, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        return text.encode("utf-8", "backslashreplace")


class HtmlAnswer(HTMLResponse):
    """An HTML page of any strings (a lone surrogate shown as its escape)."""

    def render(self, content: Any) -> bytes:
        if isinstance(content, str):
            return content.encode("utf-8", "backslashreplace")
        return bytes(super().render(content))
