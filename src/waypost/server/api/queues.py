"""The API's routes for named queues: list them, read one, set one's limits."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from waypost.model import operations_queues as oq
from waypost.model.requests import Http

from ..bodies import api_router
from .common import ERRORS, StrictBody
from .derived import add_route, listed, renamed

router = api_router(responses=ERRORS)


class QueueBody(StrictBody):
    """Limits to set; a field left out keeps its limit, null removes it."""

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


add_route(
    router,
    oq.ListQueues,
    lambda found, _: found[0].to_json(),
    summary="One named queue and its load.",
    fields=renamed(name="queue"),
    name="get_queue",
    at=Http("GET", "/v1/queues/{name:id}", tag="queues"),
)


add_route(
    router,
    oq.ConfigureQueue,
    lambda info, _: info.to_json(),
    summary="Set a named queue's limits: concurrency, rate (operator, admin).",
    body=QueueBody,
    fields=renamed(name="queue"),
)
