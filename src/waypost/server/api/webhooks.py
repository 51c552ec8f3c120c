"""Webhooks over HTTP: signed deliveries by correlation, and the tenant's sources."""

from __future__ import annotations

from typing import Any

from fastapi import Request
from pydantic import Field

from waypost.model import webhooks as wh
from waypost.model.identity import Principal
from waypost.model.wire import to_wire

from ..bodies import api_router
from .common import ERRORS, StrictBody, door
from .derived import add_route, done, listed, wired

router = api_router(responses=ERRORS)


# == webhooks by correlation =======================================
# `POST /v1/webhooks/{url_id}` is the one route of the API that takes no API key: the
# sender signs the delivery with the source's secret (Standard Webhooks), and the door
# runs it for the unauthenticated principal. Its refusals never say which tenant owns a
# source: an unknown URL id and a wrong signature are one answer.
class WebhookSourceBody(StrictBody):
    source: str = Field(description="The source's id in the tenant (its URL has `url_id`).")
    signal: str = Field(description="The signal its deliveries send.")
    correlate_key: str = Field(description="The key of `correlate=(key, value)` runs wait with.")
    correlate_path: str = Field(description="Where the value is in the JSON body: `data.id`.")
    tolerance_seconds: int = Field(default=300, description="How old a delivery may be.")


@router.post(
    "/v1/webhooks/{source:id}",
    tags=["webhooks"],
    summary="A signed webhook: its signal goes to the runs waiting with its correlation value.",
    responses={
        401: {"description": "Unknown source, wrong signature, or a stale timestamp."},
        404: {"description": "No run waits for it (nothing kept: a retry may deliver)."},
    },
)
async def deliver_webhook(request: Request, source: str) -> dict[str, Any]:
    sent = request.headers
    headers = {name: sent[name] for name in wh.WEBHOOK_HEADERS if name in sent}
    body = await request.body()
    delivered = await door(request, wh.DeliverWebhook(source, headers, body), Principal.anonymous())
    out: dict[str, Any] = to_wire(delivered)
    return out


add_route(
    router,
    wh.CreateWebhookSource,
    wired,  # with the secret: shown this once
    summary="Register a webhook source (admin); its secret is in this answer only.",
    body=WebhookSourceBody,
)
add_route(
    router,
    wh.ListWebhookSources,
    listed("sources"),
    summary="The tenant's webhook sources.",
)
add_route(
    router,
    wh.DeleteWebhookSource,
    done("deleted"),
    summary="Delete a webhook source.",
)
