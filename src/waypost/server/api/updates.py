"""The API's query and update routes (decision 0020).

`POST /v1/runs/{run_id}/queries/{name}` answers what the run's query handler returns
(readers; nothing is recorded). `POST /v1/runs/{run_id}/updates/{name}` validates,
records and waits for an update (starters and operators): 200 with its result, 422
`update_rejected` (nothing recorded) or `update_failed` (its handler raised), 408
`update_timeout` (accepted and still running: ask again with the same `update_id`).
"""

from __future__ import annotations

from typing import Any

from fastapi import Request
from pydantic import Field, StrictFloat, StrictInt

from waypost.model import operations as ops

from ..bodies import ErrorBody, api_router
from .common import MAX_WAIT, Caller, StrictBody, door

router = api_router(
    responses={
        status: {"model": ErrorBody, "description": what}
        for status, what in {
            401: "No valid API key.",
            403: "The key's roles do not allow it.",
            404: "No such run in the key's tenant.",
            409: "The run has finished (updates), or cannot be replayed.",
            422: "The request is not valid; the query failed; the update was rejected "
            "(nothing recorded) or its handler raised.",
            503: "The database does not answer, or the run's history kept changing.",
        }.items()
    }
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


@router.post(
    "/v1/runs/{run_id:id}/queries/{name:id}",
    tags=["runs"],
    summary="What a run's query handler answers; read-only, never recorded.",
)
async def query(
    request: Request, run_id: str, name: str, principal: Caller, body: QueryBody | None = None
) -> dict[str, Any]:
    args = tuple(body.args) if body is not None else ()
    result = await door(request, ops.Query(run_id=run_id, query=name, args=args), principal)
    return {"run_id": run_id, "query": name, "result": result}


@router.post(
    "/v1/runs/{run_id:id}/updates/{name:id}",
    tags=["runs"],
    summary="Validate, record and run an update; answers its result (or waits at most "
    "`timeout`: 408, ask again with the same update_id).",
    responses={408: {"description": "Accepted, not completed yet."}},
)
async def update(
    request: Request, run_id: str, name: str, principal: Caller, body: UpdateBody | None = None
) -> dict[str, Any]:
    body = body or UpdateBody()
    request_ = ops.Update(
        run_id=run_id,
        update=name,
        args=tuple(body.args),
        update_id=body.update_id,
        timeout=min(body.timeout, MAX_WAIT),  # no float(): 10**400 is an int, not a float
    )
    answer: ops.UpdateAnswer = await door(request, request_, principal)
    return {
        "run_id": run_id,
        "update": name,
        "update_id": answer.update_id,
        "result": answer.result,
    }
