"""The API's query and update routes (decision 0020).

`POST /v1/runs/{run_id}/queries/{name}` answers what the run's query handler returns
(readers; nothing is recorded). `POST /v1/runs/{run_id}/updates/{name}` validates,
records and waits for an update (starters and operators): 200 with its result, 422
`update_rejected` (nothing recorded) or `update_failed` (its handler raised), 408
`update_timeout` (accepted and still running: ask again with the same `update_id`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field, StrictFloat, StrictInt

from waypost.model import operations as ops

from ..bodies import api_router
from .common import CORE_REFUSALS, MAX_WAIT, StrictBody, refusals
from .derived import add_route

router = api_router(
    responses=refusals(
        *CORE_REFUSALS,
        said={
            404: "No such run in the key's tenant.",
            409: "The run has finished (updates), or cannot be replayed.",
            422: "The request is not valid; the query failed; the update was rejected "
            "(nothing recorded) or its handler raised.",
            503: "The database does not answer, or the run's history kept changing.",
        },
    )
)


class QueryBody(StrictBody):
    args: list[Any] = Field(default_factory=list, description="The query handler's arguments.")


class UpdateBody(StrictBody):
    args: list[Any] = Field(default_factory=list, description="The update handler's arguments.")
    update_id: str | None = Field(
        default=None,
        description="Deduplicates: the same id again answers the first update's result.",
    )
    timeout: StrictFloat | StrictInt = Field(
        default=MAX_WAIT, description=f"Seconds to wait for the result (at most {MAX_WAIT:g})."
    )


def _query(path: Mapping[str, str], body: QueryBody | None) -> dict[str, Any]:
    args = tuple(body.args) if body is not None else ()
    return {"run_id": path["run_id"], "query": path["name"], "args": args}


add_route(
    router,
    ops.Query,
    lambda result, path: {"run_id": path["run_id"], "query": path["name"], "result": result},
    summary="What a run's query handler answers; read-only, never recorded.",
    body=QueryBody,
    body_required=False,
    fields=_query,
)


def _update(path: Mapping[str, str], body: UpdateBody | None) -> dict[str, Any]:
    body = body or UpdateBody()
    return {
        "run_id": path["run_id"],
        "update": path["name"],
        "args": tuple(body.args),
        "update_id": body.update_id,
        "timeout": min(body.timeout, MAX_WAIT),  # no float(): 10**400 is an int, not a float
    }


def _updated(answer: ops.UpdateAnswer, path: Mapping[str, str]) -> dict[str, Any]:
    return {
        "run_id": path["run_id"],
        "update": path["name"],
        "update_id": answer.update_id,
        "result": answer.result,
    }


add_route(
    router,
    ops.Update,
    _updated,
    summary="Validate, record and run an update; answers its result (or waits at most "
    "`timeout`: 408, ask again with the same update_id).",
    body=UpdateBody,
    body_required=False,
    fields=_update,
    responses={408: {"description": "Accepted, not completed yet."}},
)
