"""The run calls of `AsyncClient` whose routes are written by hand: fork, verify, and
retention's purge and purged runs (the other run commands' routes are derived).

Each is the embedded engine's call made remote (`twins.remote_twin`), so code moves
between `wp.Engine` and `wp.Client` unchanged; here is only how its request crosses the
wire (`remote_wire.wire`). A refusal comes back as the same error class (see
`remote.error_from`).
"""

from __future__ import annotations

from typing import Any

from waypost.model import operations as ops
from waypost.model.events import ChainProblem
from waypost.model.fork import Forked
from waypost.model.records import PurgedRun, PurgeReport

from .door import Sends
from .fork import ForkCalls
from .remote_wire import record, route, wire
from .retention import RetentionCalls
from .runs import RunQueryCalls
from .twins import remote_twin


class RunRequests:
    """Fork, verify and retention calls of a remote client (role operator or admin)."""

    fork = remote_twin(ForkCalls.fork)
    verify = remote_twin(RunQueryCalls.verify)
    purge_runs = remote_twin(RetentionCalls.purge_runs)
    purged_run = remote_twin(RetentionCalls.purged_run)
    purged_runs = remote_twin(RetentionCalls.purged_runs)


@wire(ops.Fork)
async def _fork(send: Sends, asked: ops.Fork) -> Forked:
    body = {
        "reason": asked.reason,
        "step": asked.at_step,
        "seq": asked.up_to_seq,
        "run_id": asked.new_run_id,
    }
    data = await send(*route(asked), json=body)
    return Forked(
        run_id=str(data["run_id"]),
        forked_from=dict(data.get("forked_from") or {}),
        created=bool(data.get("created", True)),
    )


@wire(ops.Verify)
async def _verify(send: Sends, asked: ops.Verify) -> list[ChainProblem]:
    data = await send(*route(asked))
    return [ChainProblem(int(p["seq"]), str(p["problem"])) for p in data["problems"]]


@wire(ops.PurgeRuns)
async def _purge_runs(send: Sends, asked: ops.PurgeRuns) -> PurgeReport:
    body: dict[str, Any] = {
        "older_than": asked.older_than_seconds,
        "dry_run": asked.dry_run,
        "limit": asked.limit,
        "reason": asked.reason,
    }
    return record(PurgeReport, await send(*route(asked), json=body))


@wire(ops.GetPurged)
async def _purged_run(send: Sends, asked: ops.GetPurged) -> PurgedRun:
    return record(PurgedRun, await send(*route(asked)))


@wire(ops.ListPurged)
async def _purged_runs(send: Sends, asked: ops.ListPurged) -> list[PurgedRun]:
    data = await send(*route(asked), params={"limit": asked.limit})
    return [record(PurgedRun, item) for item in data["purged_runs"]]
