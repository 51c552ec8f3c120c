"""Ids that contain `/` in URL paths: `/v1/runs/a%2Fb/history` is run `a/b`'s history.

An id may contain `/` (a run id `orders/2026/o-1`, a schedule id `eu/nightly`). A
client writes it as one path segment, its slashes percent-encoded (`%2F`), but the
server decodes the path before routing, so `a%2Fb` would become two segments: run
`a/b` unreachable, and `/v1/runs/a%2Fhistory` read as run `a`'s history.

`EncodedSlashes` (ASGI middleware) decodes the path itself when it holds `%2F`,
writing each encoded slash as `SLASH`, a control character no id may contain
(`check_id` refuses them), so the segment stays one; the `id` path convertor
(`{run_id:id}`) matches one segment and gives the slashes back. A path that already
holds `SLASH` (a client's `%00`) is left as the server decoded it: its ids are
refused as ids with a control character, never read as slashes.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import quote, unquote

from starlette.convertors import Convertor, register_url_convertor

SLASH = "\x00"
_ENCODED_SLASH = re.compile(rb"%2[fF]")

Scope = MutableMapping[str, Any]
App = Callable[[Scope, Any, Any], Awaitable[None]]


class IdConvertor(Convertor[str]):
    """One path segment, its encoded slashes (`SLASH`) given back as `/`."""

    regex = "[^/]+"

    def convert(self, value: str) -> str:
        return value.replace(SLASH, "/")

    def to_string(self, value: str) -> str:
        return quote(value, safe="")


register_url_convertor("id", IdConvertor())


def decoded_path(raw_path: bytes) -> str | None:
    """The path of `raw_path` with each `%2F` written as `SLASH` (None: it has none, or
    the path holds `SLASH` itself)."""
    if not _ENCODED_SLASH.search(raw_path):
        return None
    parts = [unquote(p.decode("latin-1")) for p in _ENCODED_SLASH.split(raw_path)]
    if any(SLASH in p for p in parts):
        return None
    return SLASH.join(parts)


class EncodedSlashes:
    """Keeps a path segment's encoded slashes inside it for routing (see the module)."""

    def __init__(self, app: App) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            raw = scope.get("raw_path")
            path = decoded_path(raw) if isinstance(raw, bytes) else None
            if path is not None:
                scope = {**scope, "path": path}
        await self.app(scope, receive, send)
