"""The operator calls of `AsyncClient` whose routes are written by hand: fork, purge,
purged runs, named queues and verify (the run commands are derived: `twins.py`).

Each has the name, parameters and answer of the embedded engine's call, without
`tenant=` (the API key decides it), so code moves between `wp.Engine` and
`wp.Client` unchanged; a refusal comes back as the same error class (see
`remote.error_from`).
"""

from __future__ import annotations

import dataclasses
import typing
from datetime import datetime, timedelta
from enum import Enum
from typing import Any, TypeVar
from urllib.parse import quote

from waypost import errors as e
from waypost.model import operations as ops, operations_queues as oq
from waypost.model.events import ChainProblem
from waypost.model.fork import Forked
from waypost.model.identity import Principal, check_id
from waypost.model.queues import QueueInfo
from waypost.model.records import PurgedRun, PurgeReport

from .door import Sends

R = TypeVar("R")
Q = TypeVar("Q", bound=ops.Request[Any])


class OperatorRequests:
    """Operator and retention calls of a remote client (role operator or admin)."""

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

    # == retention and audit =============================================================
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
        return _record(PurgeReport, await self._send("POST", "/v1/runs/purge", json=body))

    async def purged_run(self, run_id: str) -> PurgedRun:
        """The summary the purged run `run_id` left; `RunNotFound` if it has none."""
        asked = checked_here(ops.GetPurged(run_id=run_id))
        data = await self._send("GET", f"/v1/purged-runs/{segment(asked.run_id)}")
        return _record(PurgedRun, data)

    async def purged_runs(self, *, limit: int = 100) -> list[PurgedRun]:
        """The tenant's purged runs, most recently purged first."""
        asked = checked_here(ops.ListPurged(limit=limit))
        data = await self._send("GET", "/v1/purged-runs", params={"limit": asked.limit})
        return [_record(PurgedRun, item) for item in data["purged_runs"]]

    # == named queues =====================================================================
    async def configure_queue(
        self,
        name: str,
        *,
        concurrency: int | str | None = oq.KEEP,
        rate: tuple[int, float] | str | None = oq.KEEP,
        key_concurrency: int | str | None = oq.KEEP,
        worker_concurrency: int | str | None = oq.KEEP,
    ) -> QueueInfo:
        """Set the limits of the tenant's queue `name`: `concurrency` (attempts at once,
        across every engine), `rate` ((N, period): N starts per period seconds); None
        removes a limit, one not given stays. Operator."""
        asked = checked_here(
            oq.ConfigureQueue(
                queue=name,
                concurrency=concurrency,
                rate=rate,
                key_concurrency=key_concurrency,
                worker_concurrency=worker_concurrency,
            )
        )
        body: dict[str, Any] = {}
        if asked.worker_concurrency != oq.KEEP:
            body["worker_concurrency"] = asked.worker_concurrency
        if asked.key_concurrency != oq.KEEP:
            body["key_concurrency"] = asked.key_concurrency
        if asked.concurrency != oq.KEEP:
            body["concurrency"] = asked.concurrency
        if asked.rate != oq.KEEP:
            body["rate"] = list(asked.rate) if asked.rate is not None else None
        data = await self._send("PUT", f"/v1/queues/{segment(asked.queue)}", json=body)
        return _queue(data)

    async def queues(self) -> list[QueueInfo]:
        """The tenant's named queues, configured or holding attempts, by name."""
        data = await self._send("GET", "/v1/queues")
        return [_queue(item) for item in data["queues"]]

    async def queue(self, name: str) -> QueueInfo:
        """One of the tenant's named queues (`QueueNotFound` if there is none)."""
        asked = checked_here(oq.ListQueues(queue=name))
        return _queue(await self._send("GET", f"/v1/queues/{segment(asked.queue or '')}"))

    async def verify(self, run_id: str) -> list[ChainProblem]:
        """Problems in the run's hash chain (empty when the history is intact), as the
        server checks the history it stores."""
        asked = checked_here(ops.Verify(run_id=run_id))
        data = await self._send("GET", run_path(asked.run_id, "/verify"))
        return [ChainProblem(int(p["seq"]), str(p["problem"])) for p in data["problems"]]


def checked_here(request: Q) -> Q:
    """`request` checked as the server's door will check its fields (ids, reasons, counts,
    JSON values): a bad one is refused here, with the engine's error, before anything is
    sent (and NaN, which has no JSON form, never reaches the server as something else).
    The server checks it again, with the caller's roles."""
    done: Q = request.checked(Principal.anonymous())  # type: ignore[assignment]
    return done


def _queue(data: Any) -> QueueInfo:
    info = _record(QueueInfo, data)
    rate = info.rate
    if rate is not None:  # a JSON pair
        info = dataclasses.replace(info, rate=(int(rate[0]), float(rate[1])))
    return info


def segment(text: str) -> str:
    """`text` as one path segment of a URL."""
    return quote(text, safe="")


def run_path(run_id: str, tail: str = "") -> str:
    """The path of run `run_id` (checked as the engine checks an id: `InvalidRequest` for
    an empty, overlong or control-character id, before anything is sent), then `tail`."""
    return f"/v1/runs/{segment(check_id(run_id, 'run_id'))}{tail}"


def _record(cls: type[R], data: Any) -> R:
    """A record dataclass from its JSON form (`to_wire`): datetimes from ISO text, enums
    from their values; keys the record does not have are left out (a newer server)."""
    if not isinstance(data, dict):
        raise e.WaypostError(f"the server answered {type(data).__name__}, not a {cls.__name__}")
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for field in dataclasses.fields(cls):  # type: ignore[arg-type]
        if field.name in data:
            values[field.name] = _value(hints[field.name], data[field.name])
    return cls(**values)


def _value(hint: Any, value: Any) -> Any:
    if value is None:
        return None
    kinds = typing.get_args(hint) or (hint,)
    if datetime in kinds and isinstance(value, str):
        return datetime.fromisoformat(value)
    for kind in kinds:
        if isinstance(kind, type) and issubclass(kind, Enum):
            return kind(value)
    return value
