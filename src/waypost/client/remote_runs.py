"""The run calls of `AsyncClient` whose routes are written by hand: fork, verify, and
retention's purge and purged runs (the other run commands are derived: `twins.py`).

Each has the name, parameters and answer of the embedded engine's call, without
`tenant=` (the API key decides it), so code moves between `wp.Engine` and
`wp.Client` unchanged; a refusal comes back as the same error class (see
`remote.error_from`).
"""

from __future__ import annotations

from datetime import timedelta

from waypost.model import operations as ops
from waypost.model.events import ChainProblem
from waypost.model.fork import Forked
from waypost.model.records import PurgedRun, PurgeReport

from .door import Sends
from .remote_wire import checked_here, record, run_path, segment


class RunRequests:
    """Fork, verify and retention calls of a remote client (role operator or admin)."""

    _send: Sends  # the JSON answer of a request (an error answer raised as its error)

    async def fork(
        self,
        run_id: str,
        *,
        reason: str,
        at_step: str | None = None,
        up_to_seq: int | None = None,
        new_run_id: str | None = None,
    ) -> Forked:
        """Start a new run from run `run_id`'s history up to a cut (`at_step`: before that
        step; `up_to_seq`: after that event; neither: after the last event that can be
        copied): the copied steps' results are reused, the rest runs anew. The answer's
        `run_id` is the new run; the same id, source and cut again answer the same run
        (`created=False`). A source with an activity step in flight is `InvalidState`.
        Operator."""
        asked = checked_here(
            ops.Fork(
                run_id=run_id,
                reason=reason,
                at_step=at_step,
                up_to_seq=up_to_seq,
                new_run_id=new_run_id,
            )
        )
        body = {
            "reason": asked.reason,
            "step": asked.at_step,
            "seq": asked.up_to_seq,
            "run_id": asked.new_run_id,
        }
        data = await self._send("POST", run_path(asked.run_id, "/fork"), json=body)
        return Forked(
            run_id=str(data["run_id"]),
            forked_from=dict(data.get("forked_from") or {}),
            created=bool(data.get("created", True)),
        )

    async def purge_runs(
        self,
        older_than: timedelta | float,
        *,
        dry_run: bool = False,
        limit: int | None = None,
        reason: str | None = None,
    ) -> PurgeReport:
        """Purge the tenant's finished runs that finished more than `older_than` (a
        timedelta, or seconds) ago, oldest first, at most `limit` (None: all). Each
        leaves a summary (`purged_run`, `purged_runs`); its id then answers
        `RunNotFound`. `dry_run` counts what would go and writes nothing. Operator."""
        seconds = older_than.total_seconds() if isinstance(older_than, timedelta) else older_than
        asked = checked_here(
            ops.PurgeRuns(older_than_seconds=seconds, dry_run=dry_run, limit=limit, reason=reason)
        )
        body = {
            "older_than": asked.older_than_seconds,
            "dry_run": asked.dry_run,
            "limit": asked.limit,
            "reason": asked.reason,
        }
        return record(PurgeReport, await self._send("POST", "/v1/runs/purge", json=body))

    async def purged_run(self, run_id: str) -> PurgedRun:
        """The summary the purged run `run_id` left; `RunNotFound` if it has none."""
        asked = checked_here(ops.GetPurged(run_id=run_id))
        data = await self._send("GET", f"/v1/purged-runs/{segment(asked.run_id)}")
        return record(PurgedRun, data)

    async def purged_runs(self, *, limit: int = 100) -> list[PurgedRun]:
        """The tenant's purged runs, most recently purged first."""
        asked = checked_here(ops.ListPurged(limit=limit))
        data = await self._send("GET", "/v1/purged-runs", params={"limit": asked.limit})
        return [record(PurgedRun, item) for item in data["purged_runs"]]

    async def verify(self, run_id: str) -> list[ChainProblem]:
        """Problems in the run's hash chain (empty when the history is intact), as the
        server checks the history it stores."""
        asked = checked_here(ops.Verify(run_id=run_id))
        data = await self._send("GET", run_path(asked.run_id, "/verify"))
        return [ChainProblem(int(p["seq"]), str(p["problem"])) for p in data["problems"]]
