"""Runs over HTTP: start, read, page, signal, operator commands, fork, purge,
re-encryption, signal-with-start."""

from __future__ import annotations

import contextlib
import re
from typing import Annotated, Any

from fastapi import Query, Request, Response
from pydantic import Field, StrictBool, StrictFloat, StrictInt, StrictStr

from waypost.errors import InvalidRequest, ResultTimeout, RunEndedError
from waypost.model import operations as ops
from waypost.model.identity import preview
from waypost.model.operations_runs import DEFAULT_HISTORY_PAGE
from waypost.model.requests import Http
from waypost.model.wire import event_wire, problems_wire, to_wire

from ..bodies import api_router
from .common import ERRORS, MAX_WAIT, Caller, StrictBody, door
from .derived import add_derived_routes, add_route, by_name, renamed, wired

router = api_router(responses=ERRORS)


class StartBody(StrictBody):
    workflow: str = Field(description="A workflow's name (code or a published definition).")
    input: Any = Field(default=None, description="The run's input (JSON).")
    version: StrictStr | StrictInt | None = Field(default=None, description="Default: the newest.")
    run_id: str | None = Field(
        default=None, description="The run's id; the same id with the same input finds it again."
    )
    priority: StrictInt = Field(
        default=0, description="-1000..1000: claimed before the tenant's lower priorities."
    )
    concurrency_key: str | None = Field(
        default=None,
        description="A key (a customer's id): a queue's key_concurrency bounds the attempts "
        "running at once of the runs with one key.",
    )
    dedup_id: str | None = Field(
        default=None,
        description="While a run started with this id has not finished, a start with it "
        "answers that run (200).",
    )
    queue: str | None = Field(
        default=None,
        description="A workflow queue: the run is 'enqueued' until the queue's limits admit "
        "it (default: the workflow's own queue, if any).",
    )
    run_timeout: StrictFloat | StrictInt | None = Field(
        default=None,
        description="Seconds: a run that has not ended that long after its start ends "
        "'failed' (RunTimedOut); default: the workflow's own run_timeout, if any.",
    )


class SignalBody(StrictBody):
    payload: Any = Field(default=None, description="What the run receives with the signal.")


def _add_start_route(
    kind: type[ops.StartRun] | type[ops.SignalWithStart],
    model: type[StrictBody],
    *,
    name: str,
    summary: str,
    existed: str,
) -> None:
    """Add the route of `kind`'s declaration for a request that starts a run, its fields
    the body's (`model`): it answers the run, made (201) or found (200, `existed`)."""
    http = kind.http
    assert isinstance(http, Http)

    async def endpoint(
        request: Request, response: Response, body: Any, principal: Caller
    ) -> dict[str, Any]:
        started = await door(request, kind(**by_name({}, body)), principal)
        if not started.created:
            response.status_code = 200
        return _run(await door(request, ops.GetRun(run_id=started.run_id), principal))

    endpoint.__annotations__["body"] = model  # what FastAPI reads the body with
    endpoint.__name__ = endpoint.__qualname__ = name
    router.add_api_route(
        http.path,
        endpoint,
        methods=[http.method],
        tags=[http.tag],
        status_code=http.status,
        summary=summary,
        responses={200: {"description": existed}},
    )


_add_start_route(
    ops.StartRun,
    StartBody,
    name="start",
    summary="Start a run (the same run_id and input again: the same run, 200).",
    existed="A run with this id and input existed already.",
)


@router.get("/v1/runs", tags=["runs"], summary="Runs, newest first, a page at a time.")
async def list_runs(
    request: Request,
    principal: Caller,
    status: str | None = None,
    workflow: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    cursor: str | None = None,
) -> dict[str, Any]:
    page = await door(
        request,
        ops.PageRuns(status=status, workflow=workflow, limit=limit, cursor=cursor),
        principal,
    )
    return {"runs": [_run(r) for r in page.runs], "next_cursor": page.next_cursor}


add_route(
    router, ops.GetRun, lambda info, _: _run(info), summary="A run as it stands.", name="get_run"
)


@router.get(
    "/v1/runs/{run_id:id}/result",
    tags=["runs"],
    summary="Wait (up to `wait` seconds) for the run to end; 202 if it has not.",
    responses={202: {"description": "The run has not ended yet."}},
)
async def run_result(
    request: Request,
    response: Response,
    run_id: str,
    principal: Caller,
    wait: Annotated[float, Query(ge=0, le=MAX_WAIT)] = 0,
) -> dict[str, Any]:
    info = await door(request, ops.GetRun(run_id=run_id), principal)  # 404 at once if none
    if wait > 0 and not info.finished:
        with contextlib.suppress(RunEndedError, ResultTimeout):
            await door(request, ops.AwaitResult(run_id=run_id, timeout=wait), principal)
        info = await door(request, ops.GetRun(run_id=run_id), principal)
    if not info.finished:
        response.status_code = 202
    return _run(info)


@router.get(
    "/v1/runs/{run_id:id}/history",
    tags=["runs"],
    summary="A page of a run's history, oldest first; `next_after` asks for the next.",
)
async def history(
    request: Request,
    run_id: str,
    principal: Caller,
    after_seq: Annotated[int, Query(description="The events after this one.")] = 0,
    limit: Annotated[
        int, Query(description="At most this many events (1 to 1,000).")
    ] = DEFAULT_HISTORY_PAGE,
) -> dict[str, Any]:
    # A page at a time, bounded in events and bytes: never a whole history in memory.
    page = await door(
        request, ops.PageHistory(run_id=run_id, after_seq=after_seq, limit=limit), principal
    )
    events = [event_wire(e) for e in page.events]
    return {"run_id": run_id, "events": events, "next_after": page.next_after}


add_route(
    router,
    ops.Verify,
    lambda problems, path: {"run_id": path["run_id"], **problems_wire(problems)},
    summary="Check a run's hash chain.",
)
add_route(
    router,
    ops.Signal,
    lambda _, path: {"run_id": path["run_id"], "signal": path["name"], "accepted": True},
    summary="Deliver a signal; the run takes it in at its next wait for it.",
    body=SignalBody,
    body_required=False,
    fields=renamed(name="signal"),
)


# Commands on a run: cancel, terminate, pause, resume, retry, skip, update-input; each
# route is derived from its request's declaration.
add_derived_routes(router, "runs")


class ForkBody(StrictBody):
    reason: str = Field(description="Why (recorded in both runs' histories).")
    step: str | None = Field(
        default=None, description="Fork before this step (a step id or definition step name)."
    )
    seq: StrictInt | None = Field(default=None, description="Fork after this event of the source.")
    run_id: str | None = Field(
        default=None, description="The new run's id; the same id, source and cut find it again."
    )


@router.post(
    "/v1/runs/{run_id:id}/fork",
    tags=["runs"],
    status_code=201,
    summary="Start a new run from this run's history up to a step; its results are reused.",
    responses={200: {"description": "This fork (same new id, source and cut) existed already."}},
)
async def fork(
    request: Request, response: Response, run_id: str, body: ForkBody, principal: Caller
) -> dict[str, Any]:
    forked = await door(
        request,
        ops.Fork(
            run_id=run_id,
            reason=body.reason,
            at_step=body.step,
            up_to_seq=body.seq,
            new_run_id=body.run_id,
        ),
        principal,
    )
    if not forked.created:
        response.status_code = 200
    return {"run_id": forked.run_id, "forked_from": forked.forked_from, "created": forked.created}


# == retention ===========================================================================
_AGE = re.compile(r"([0-9]{1,9})([smhdw])")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


class PurgeBody(StrictBody):
    older_than: StrictInt | StrictFloat | StrictStr = Field(
        description="Purge runs that finished more than this long ago: seconds, or a whole "
        "number and a unit (`90m`, `12h`, `30d`, `2w`)."
    )
    dry_run: StrictBool = Field(default=False, description="Count what would go; write nothing.")
    limit: StrictInt | None = Field(
        default=None, description="At most this many runs (oldest first)."
    )
    reason: str | None = Field(default=None, description="Recorded in each run's summary.")


def _older_than(value: float | str) -> float:
    if isinstance(value, str):
        match = _AGE.fullmatch(value)
        if match is None:
            raise InvalidRequest(
                f"older_than is seconds or a whole number and a unit (90m, 12h, 30d, 2w), "
                f"not {preview(value)}",
                field="older_than",
            )
        return float(int(match.group(1)) * _UNIT[match.group(2)])
    return value  # a number as sent: the request's check bounds it (10**400 is no float)


def _purge(_: object, body: PurgeBody) -> dict[str, Any]:
    return {
        "older_than_seconds": _older_than(body.older_than),
        "dry_run": body.dry_run,
        "limit": body.limit,
        "reason": body.reason,
    }


add_route(
    router,
    ops.PurgeRuns,
    wired,
    summary="Purge the tenant's runs that finished before a cutoff (operator, admin).",
    body=PurgeBody,
    fields=_purge,
    tag="retention",
)


@router.get(
    "/v1/purged-runs", tags=["retention"], summary="Purged runs' summaries, newest purge first."
)
async def list_purged(
    request: Request, principal: Caller, limit: Annotated[int, Query(ge=1, le=1000)] = 100
) -> dict[str, Any]:
    found = await door(request, ops.ListPurged(limit=limit), principal)
    return {"purged_runs": [to_wire(p) for p in found]}


add_route(
    router,
    ops.GetPurged,
    wired,
    summary="The summary a purged run left.",
    tag="retention",
)


class ReEncryptBody(StrictBody):
    run_id: str | None = Field(default=None, description="Only this run.")
    after: str | None = Field(
        default=None, description="Without run_id: continue after this run id (`next_after`)."
    )
    limit: StrictInt = Field(
        default=100, description="Without run_id: runs in this batch, 1..1000."
    )
    dry_run: StrictBool = Field(
        default=False, description="Count what would change; write nothing."
    )


add_route(
    router,
    ops.ReEncrypt,
    wired,
    summary="Re-encrypt stored payloads under the current key: one run, or the next batch.",
    body=ReEncryptBody,
    body_required=False,
    name="reencrypt",
)


# Repairs: commands with fields besides the reason.
def _run(info: Any) -> dict[str, Any]:
    out: dict[str, Any] = to_wire(info)
    out["finished"] = info.finished
    return out


# == signal-with-start


class SignalWithStartBody(StrictBody):
    workflow: str = Field(description="A workflow's name (code or a published definition).")
    input: Any = Field(default=None, description="The input, if this call starts the run.")
    run_id: str = Field(description="The run to signal, started first if no run has this id.")
    signal: str = Field(description="The signal's name.")
    payload: Any = Field(default=None, description="What the run receives with the signal.")
    version: StrictStr | StrictInt | None = Field(default=None, description="Default: the newest.")


_add_start_route(
    ops.SignalWithStart,
    SignalWithStartBody,
    name="signal_with_start",
    summary="Start the run and signal it, or signal the run of that id (200).",
    existed="The run existed; it got the signal.",
)
