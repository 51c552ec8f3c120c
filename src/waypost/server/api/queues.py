"""The API's routes for named queues: list them, read one, set one's limits."""

from __future__ import annotations

from typing import Any

from fastapi import Request
from pydantic import BaseModel, ConfigDict, Field

from waypost.model import operations_queues as oq

from ..bodies import api_router
from .common import ERRORS, Caller, door

router = api_router(responses=ERRORS)


class QueueBody(BaseModel):
    """Limits to set; a field left out keeps its limit, null removes it."""

    model_config = ConfigDict(extra="forbid")
    concurrency: Any = Field(
        default=oq.KEEP,
        description="At most this many attempts at once, across every engine; null: no limit.",
    )
    rate: Any = Field(
        default=oq.KEEP,
        description="At most N attempts started per period seconds, as [N, period]; null: none.",
    )
    key_concurrency: Any = Field(
        default=oq.KEEP,
        description="At most this many attempts (or admitted runs) at once of the runs with "
        "one concurrency key.",
    )
    worker_concurrency: Any = Field(
        default=oq.KEEP,
        description="At most this many attempts of the queue held at once by one engine.",
    )


@router.get("/v1/queues", tags=["queues"], summary="The tenant's named queues and their load.")
async def list_queues(request: Request, principal: Caller) -> dict[str, Any]:
    found = await door(request, oq.ListQueues(), principal)
    return {"queues": [q.to_json() for q in found]}


@router.get("/v1/queues/{name:id}", tags=["queues"], summary="One named queue and its load.")
async def get_queue(request: Request, name: str, principal: Caller) -> dict[str, Any]:
    found = await door(request, oq.ListQueues(queue=name), principal)
    out: dict[str, Any] = found[0].to_json()
    return out


@router.put(
    "/v1/queues/{name:id}",
    tags=["queues"],
    summary="Set a named queue's limits: concurrency, rate (operator, admin).",
)
async def configure_queue(
    request: Request, name: str, body: QueueBody, principal: Caller
) -> dict[str, Any]:
    request_ = oq.ConfigureQueue(
        queue=name,
        concurrency=body.concurrency,
        rate=body.rate,
        key_concurrency=body.key_concurrency,
        worker_concurrency=body.worker_concurrency,
    )
    out: dict[str, Any] = (await door(request, request_, principal)).to_json()
    return out
