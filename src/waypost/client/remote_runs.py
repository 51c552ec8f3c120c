"""How the requests of the remote client's run calls whose routes are written by hand
cross the wire: fork, verify, and retention's purge and purged runs (the other run
commands' routes are derived).

The calls themselves are the embedded engine's, made remote (`twins.remote_twin`, listed
in `AsyncClient`), so code moves between `wp.Engine` and `wp.Client` unchanged. A
refusal comes back as the same error class (see `remote.error_from`).
"""

from __future__ import annotations

from typing import Any

from waypost.model import operations as ops
from waypost.model.events import ChainProblem
from waypost.model.fork import Forked
from waypost.model.records import PurgedRun, PurgeReport

from .door import Sends
from .remote_wire import Wires, body, record, route


async def _fork(send: Sends, asked: ops.Fork) -> Forked:
    names = {"at_step": "step", "up_to_seq": "seq", "new_run_id": "run_id"}
    data = await send(*route(asked), json=body(asked, **names))
    return Forked(
        run_id=str(data["run_id"]),
        forked_from=dict(data.get("forked_from") or {}),
        created=bool(data.get("created", True)),
    )


async def _verify(send: Sends, asked: ops.Verify) -> list[ChainProblem]:
    data = await send(*route(asked))
    return [ChainProblem(int(p["seq"]), str(p["problem"])) for p in data["problems"]]


async def _purge_runs(send: Sends, asked: ops.PurgeRuns) -> PurgeReport:
    sent: dict[str, Any] = {
        "older_than": asked.older_than_seconds,
        "dry_run": asked.dry_run,
        "limit": asked.limit,
        "reason": asked.reason,
    }
    return record(PurgeReport, await send(*route(asked), json=sent))


async def _purged_run(send: Sends, asked: ops.GetPurged) -> PurgedRun:
    return record(PurgedRun, await send(*route(asked)))


async def _purged_runs(send: Sends, asked: ops.ListPurged) -> list[PurgedRun]:
    data = await send(*route(asked), params={"limit": asked.limit})
    return [record(PurgedRun, item) for item in data["purged_runs"]]


RUN_WIRES: Wires = {
    ops.Fork: _fork,
    ops.Verify: _verify,
    ops.PurgeRuns: _purge_runs,
    ops.GetPurged: _purged_run,
    ops.ListPurged: _purged_runs,
}
