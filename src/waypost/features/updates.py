"""Queries and updates of a run (decision 0020).

A query is answered by the run's code rebuilt from its history in this engine, on an
instance made for the purpose (never the cached one that runs the workflow) and
then dropped: nothing it does is committed, so the history is the same before and
after. Finished runs are answered the same way.

An update is validated the same way, against the history as it is now, and
accepted by appending UpdateAccepted **after exactly the event the validation
saw** (the run's optimistic sequence check, as every commit of the run): if
anything was appended meanwhile the validation is done again on the new history,
so an update is never recorded against a state it was not validated against. A
rejected update writes nothing. The accepted update wakes the run; its code runs
the handler and records UpdateCompleted, which the caller waits for by reading the
history. The update id is the deduplication key: an UpdateAccepted of that id in
the history answers its result instead of a second acceptance, and two concurrent
calls with one id cannot both append (one of them fails the sequence check and
finds the other's).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from waypost.engine.compute import Recent
from waypost.engine.ports import Machinery
from waypost.errors import (
    ComputeLimitExceeded,
    InvalidState,
    PayloadError,
    QueryFailed,
    QuotaExceeded,
    RunNotActive,
    StoreContention,
    UpdateFailed,
    UpdateTimeout,
    WaypostError,
)
from waypost.model import operations as ops
from waypost.model.events import (
    TERMINAL_EVENTS,
    UNSET,
    Event,
    EventType,
    UpdateAccepted,
    UpdateCompleted,
    canonical_json,
    feeds_code,
)
from waypost.model.identity import Principal, preview
from waypost.model.repairs import effective
from waypost.model.requests import handles
from waypost.model.status import RunStatus
from waypost.runtime.instance import InstanceDropped, WorkflowInstance
from waypost.store.base import Conflict, Limits, RunCommit, RunRecord

from .definitions import Definitions
from .runs import run_not_found

_E = EventType
T = TypeVar("T")
_TRIES = 20  # validations before giving up on a run whose history keeps moving


def accepted_update(history: Sequence[Event], update_id: str) -> Event | None:
    """The UpdateAccepted of `update_id` in a history, if any."""
    for ev in history:
        if ev.type == _E.UPDATE_ACCEPTED and UpdateAccepted.parse(ev).update_id == update_id:
            return ev
    return None


class Updates:
    """Queries and updates, for one engine."""

    def __init__(self, machinery: Machinery, definitions: Definitions) -> None:
        self.machinery = machinery
        self.definitions = definitions
        self._answers: Recent[tuple[str, str, int, str, str, str], Any] = Recent()

    async def _with_rebuilt(
        self,
        run: RunRecord,
        history: list[Event],
        what: str,
        then: Callable[[WorkflowInstance], T],
    ) -> T:
        """`then(instance)` on the run's code replayed from `history` on a fresh instance
        (dropped afterwards). The check, the replay and `then` run on the compute lane:
        a tenant's long history or heavy query never holds the loop."""
        m = self.machinery
        rid = preview(run.run_id)
        defn = m.registry.find_workflow(run.workflow, run.version)
        if defn is None:
            defn = await self.definitions.workflow_for(run, history)
        if defn is None:
            raise InvalidState(
                f"cannot {what}: this engine does not have the code of workflow "
                f"{preview(run.workflow)} version {preview(run.version)}, which answers "
                "queries and updates by replaying the run. Register that workflow with this "
                "engine (engine.register), or ask a process that has it: a waypost server "
                "or CLI given its module (--app MODULE)"
            )
        inst = m.new_instance(defn, run.tenant, run.run_id)
        handled = run.processed_seq
        ending = next((ev for ev in effective(history) if ev.type in TERMINAL_EVENTS), None)
        if ending is not None:
            # The code ended the run while handling the last event it was fed before the
            # end: that one goes in live, where returning is what the code does.
            fed = [ev for ev in history if ev.seq < ending.seq]
            last_fed = max((ev.seq for ev in fed if feeds_code(ev)), default=1)
            handled = min(handled, last_fed - 1)
        else:
            fed = history

        def rebuild_then() -> T:
            problems = m.settings.chain.verify(history, run=(run.tenant, run.run_id))
            if problems:
                raise InvalidState(
                    f"cannot {what}: run {rid}'s history fails its integrity check at event "
                    f"{problems[0].seq}"
                )
            try:
                inst.replay(fed, handled)
            except (WaypostError, InstanceDropped) as exc:
                if isinstance(exc, ComputeLimitExceeded):
                    raise
                raise InvalidState(f"cannot {what}: replaying run {rid} fails: {exc}") from exc
            return then(inst)

        try:
            return await m.compute.feed(inst, rebuild_then, what, events=len(fed), asked=True)
        finally:
            inst.close()

    async def _args(self, tenant: str, what: str, args: Sequence[Any]) -> Any:
        m = self.machinery
        encoded = m.codec.encode(list(args))
        await self.definitions.bounded(tenant, what, encoded)
        return encoded

    # == queries ================================================================
    @handles(ops.Query)
    async def query(self, req: ops.Query, principal: Principal) -> Any:
        """What the run's query handler `req.query` answers; nothing is recorded."""
        m = self.machinery
        tenant = principal.tenant
        args = await self._args(tenant, "query's arguments", req.args)
        run, history = await m.store.load_run(tenant, req.run_id)
        if run is None:
            raise run_not_found(req.run_id, tenant)
        # A query is a function of the history: the same query of the same history is
        # answered once and kept, so a flood of them costs one replay.
        key = (tenant, run.run_id, run.last_seq, run.last_hash, req.query, canonical_json(args))
        if (known := self._answers.get(key)) is not None:
            return m.codec.decode(known)

        def answer(inst: WorkflowInstance) -> Any:
            value = inst.answer_query(req.query, m.codec.decode(args))
            try:
                return m.codec.encode(value)
            except PayloadError as exc:
                raise QueryFailed(
                    f"query {req.query!r} answered what cannot be sent: {exc}"
                ) from exc

        what = f"query run {preview(req.run_id)}"
        encoded = await self._with_rebuilt(run, history, what, answer)
        self._answers.put(key, encoded, len(canonical_json(encoded)))
        return m.codec.decode(encoded)

    # == updates ================================================================
    @handles(ops.Update)
    async def update(self, req: ops.Update, principal: Principal) -> ops.UpdateAnswer:
        """Validate, record and wait for update `req.update` (see the module's text)."""
        m = self.machinery
        tenant, run_id = principal.tenant, req.run_id
        update_id = req.update_id or f"upd-{uuid.uuid4().hex}"
        deadline = time.monotonic() + req.timeout
        args = await self._args(tenant, "update's arguments", req.args)
        what = f"update run {preview(run_id)}"
        for _ in range(_TRIES):
            run, history = await m.store.load_run(tenant, run_id)
            if run is None:
                raise run_not_found(run_id, tenant)
            found = accepted_update(history, update_id)
            if found is not None:
                used = UpdateAccepted.parse(found).name
                if used != req.update:
                    raise InvalidState(
                        f"update id {preview(update_id)} was used for update "
                        f"{preview(used)} of this run, not {req.update!r}"
                    )
                return await self._outcome(tenant, run_id, update_id, found, deadline)
            if RunStatus(run.status).finished:
                raise RunNotActive(f"cannot {what}: it has finished ({run.status})")

            def validate(inst: WorkflowInstance) -> None:
                inst.validate_update(req.update, m.codec.decode(args))

            await self._with_rebuilt(run, history, what, validate)
            accepted = UpdateAccepted(update_id=update_id, name=req.update, args=args)
            res = await m.commit_and_wake(
                RunCommit(
                    tenant=tenant,
                    run_id=run_id,
                    events=[accepted.at(m.settings.clock())],
                    now=m.settings.clock(),
                    expect_seq=run.last_seq,
                    expect_hash=run.last_hash,
                    require_active=True,
                    limits=Limits(max_events=(await m.quotas.get(tenant)).max_events_per_run),
                )
            )
            if res.ok:
                return await self._outcome(tenant, run_id, update_id, res.events[0], deadline)
            if res.conflict is Conflict.SEQ:
                continue  # the history moved on: validate against it again
            if res.conflict is Conflict.HISTORY_FULL:
                raise QuotaExceeded(
                    "max_events_per_run",
                    f"cannot {what}: its history has the most events its tenant allows",
                )
            if res.conflict is Conflict.RUN_FINISHED:
                raise RunNotActive(f"cannot {what}: it has finished ({res.status})")
            raise run_not_found(run_id, tenant)
        raise StoreContention(
            f"cannot {what}: its history kept changing while the update was validated; "
            "try again (with the same update id)"
        )

    async def _outcome(
        self, tenant: str, run_id: str, update_id: str, accepted: Event, deadline: float
    ) -> ops.UpdateAnswer:
        """Wait for the UpdateCompleted of the update `accepted` and answer it."""
        m = self.machinery
        seen = accepted.seq
        backoff = 0.01
        while True:
            run, events = await m.store.load_run(tenant, run_id, after_seq=seen)
            if run is None or run.last_seq < seen:
                # Purged, or continued as new: the generation that held it is gone.
                raise RunNotActive(
                    f"run {preview(run_id)} ended or continued as new before update "
                    f"{preview(update_id)}'s result could be read"
                )
            for ev in events:
                seen = ev.seq
                if (
                    ev.type == _E.UPDATE_COMPLETED
                    and UpdateCompleted.parse(ev).update_id == update_id
                ):
                    return self._answer(update_id, ev)
                if ev.type in TERMINAL_EVENTS:
                    raise RunNotActive(
                        f"run {preview(run_id)} ended ({ev.type}) before update "
                        f"{preview(update_id)} completed"
                    )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise UpdateTimeout(
                    f"update {preview(update_id)} of run {preview(run_id)} was accepted and "
                    "has not completed yet; ask again with the same update id for its result"
                )
            await m.wait_for_end(tenant, run_id, min(backoff, remaining))
            backoff = min(backoff * 1.5, m.settings.poll_interval, 0.5)

    def _answer(self, update_id: str, completed: Event) -> ops.UpdateAnswer:
        done = UpdateCompleted.parse(completed)
        error = None if done.error is UNSET else done.error
        if error is not None:
            raise UpdateFailed(
                f"update {preview(update_id)} failed: {error.get('type', 'Error')}: "
                f"{error.get('message', '')}"
            )
        return ops.UpdateAnswer(
            update_id, self.machinery.codec.decode(None if done.result is UNSET else done.result)
        )
