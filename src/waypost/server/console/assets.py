"""The console's stylesheet, script and icon, served by waypost (nothing from another site)."""

from __future__ import annotations

from importlib import resources

from fastapi import APIRouter
from fastapi.responses import Response

router = APIRouter(include_in_schema=False)

ASSETS = {
    "console.css": "text/css",
    "console.js": "text/javascript",
    "favicon.svg": "image/svg+xml",
}


@router.get("/static/console/{name}")
async def asset(name: str) -> Response:
    kind = ASSETS.get(name)
    if kind is None:
        return Response("not found", status_code=404, media_type="text/plain")
    body = resources.files("waypost.server").joinpath(f"static/{name}").read_text()
    return Response(
        body,
        media_type=kind,
        headers={"Cache-Control": "max-age=300", "X-Content-Type-Options": "nosniff"},
    )
