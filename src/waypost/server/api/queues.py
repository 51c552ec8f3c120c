"""The API's routes for named queues: list them, read one, set one's limits."""

from __future__ import annotations

from typing import Any

from fastapi import Request
from pydantic import BaseModel, ConfigDict, Field

from waypost.model import operations_queues as oq

from ..bodies import api_router
from .common import ERRORS, Caller, door
from .derived import add_route, listed, renamed

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


add_route(
    router,
    oq.ListQueues,
    listed("queues", lambda q: q.to_json()),
    summary="The tenant's named queues and their load.",
)


@router.get("/v1/queues/{name:id}", tags=["queues"], summary="One named queue and its load.")
async def get_queue(request: Request, name: str, principal: Caller) -> dict[str, Any]:
    found = await door(request, oq.ListQueues(queue=name), principal)
    out: dict[str, Any] = found[0].to_json()
    return out


add_route(
    router,
    oq.ConfigureQueue,
    lambda info, _: info.to_json(),
    summary="Set a named queue's limits: concurrency, rate (operator, admin).",
    body=QueueBody,
    fields=renamed(name="queue"),
)
