"""GET /metrics: the engine's series in Prometheus's text format.

Without a metrics token it is open, like most exporters, but names no tenant: every
series is answered without its tenant, workflow and queue labels, added up over them
(`Metrics.exposition(by_tenant=False)`). With a metrics token (`waypost server
--metrics-token`, or `WAYPOST_METRICS_TOKEN`) a scrape must bring it as a bearer token,
and then sees every series by tenant, workflow and queue; an API key does not do (the
token is the operator's, not a tenant's). No series carries a run's data.
"""

from __future__ import annotations

import hashlib
import hmac

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from .errors import error_body

router = APIRouter()


def token_digest(token: str) -> bytes:
    """What the server keeps of its metrics token, and compares a scrape's with."""
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()


@router.get("/metrics", include_in_schema=False)
async def metrics(request: Request) -> Response:
    exporter = getattr(request.app.state, "metrics", None)
    if exporter is None:
        return JSONResponse(error_body("not_found", "this server exports no metrics"), 404)
    wanted: bytes | None = getattr(request.app.state, "metrics_token_digest", None)
    if wanted is not None:
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token_digest(given), wanted):
            refusal = error_body("unauthenticated", "/metrics needs the metrics token")
            return JSONResponse(refusal, 401, headers={"WWW-Authenticate": "Bearer"})
    # Tenants' names only to the holder of the token.
    body, content_type = await exporter.exposition(by_tenant=wanted is not None)
    return Response(body, media_type=content_type)
