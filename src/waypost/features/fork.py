"""The operator command `fork`: a new, linked run from a run's history up to a step.

What is copied is decided by `waypost.model.fork` (decision 0008). Here:

- The source may have finished (completed, failed, cancelled, terminated) or be
  waiting, suspended or paused; an unfinished source with an activity step scheduled
  and not finished (a `running` run, or a paused one whose attempt still runs), or a
  child run that has not ended, is refused: that work would run in both. Fork it once
  the step or the child has finished, or after ending the run.
- A fork never shares its source's children: copying stops at a child's start, so the
  fork's code starts the children from there again, as its own runs under its own
  ids (`<fork>-<step>`); the source's children stay the source's.
- The new run is created as any start is, in one transaction with its copied history:
  under the tenant's start quotas, a workflow task leased here if this engine serves
  it. Its RunStarted is the source's (same workflow, version or pinned definition,
  input) plus `forked_from: {run_id, seq, step, by, reason}`, and its `started_by` is
  the forking operator (the run is started on their behalf); the run's priority is
  the source's.
- The same new run id, source and cut again answer that run (`created=False`); any
  other run of that id is `RunIdConflict`.
- An unfinished source then gets `RunForked{to_run_id, seq, step, by, reason}`, an
  audit fact its code never sees (appended after whatever is last). A finished
  source's history is closed: the link is the new run's `forked_from` alone.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from waypost.engine.ports import Machinery
from waypost.engine.starts import new_run_id
from waypost.errors import InvalidState, QuotaExceeded, RunIdConflict
from waypost.model import operations as ops
from waypost.model.events import Event, EventType, RunForked, RunStarted
from waypost.model.fork import Forked, children_in_flight, in_flight, plan_fork
from waypost.model.identity import Principal, normal_identity, preview
from waypost.model.requests import handles
from waypost.model.status import RunStatus
from waypost.runtime.interpreter import DEFINITIONS_QUEUE
from waypost.runtime.registry import workflow_queue
from waypost.store.base import Conflict, RunRecord

from .operator import operator_commit
from .runs import run_not_found

_E = EventType
_TRIES = 20


class Forks:
    """The fork command, for one engine."""

    def __init__(self, machinery: Machinery) -> None:
        self.machinery = machinery

    @handles(ops.Fork)
    async def fork(self, req: ops.Fork, principal: Principal) -> Forked:
        """Start a new run from `req.run_id`'s history up to the cut; the new run's id."""
        m = self.machinery
        tenant = principal.tenant
        source, history = await m.store.load_run(tenant, req.run_id)
        if source is None:
            raise run_not_found(req.run_id, tenant)
        finished = RunStatus(source.status).finished
        children = [] if finished else children_in_flight(history)
        if children:
            child = children[0].data
            raise InvalidState(
                f"cannot fork run {preview(req.run_id)}: its child run "
                f"{preview(str(child.get('run_id')))} (step {preview(str(child.get('step')))}) "
                "has not ended, and the fork would start its own for the same work, which "
                "would run in both; fork it once the child has ended, or after ending the run "
                "(which closes its children as their close policy says)"
            )
        busy = [] if finished else in_flight(history)
        if busy:
            step = busy[0].data
            raise InvalidState(
                f"cannot fork run {preview(req.run_id)}: its step {preview(str(step['step']))} "
                f"(activity {preview(str(step.get('activity')))}) has not finished and would "
                "run in both runs; fork it once the step has finished, or after ending the run"
            )
        problems = m.settings.chain.verify(history, run=(tenant, req.run_id))
        if problems:
            raise InvalidState(
                f"cannot fork run {preview(req.run_id)}: its history fails its integrity "
                f"check at event {problems[0].seq}"
            )
        plan = plan_fork(
            history, source.processed_seq, at_step=req.at_step, up_to_seq=req.up_to_seq
        )
        most = (await m.quotas.get(tenant)).max_events_per_run
        if most is not None and len(plan.events) + 1 > most:
            raise QuotaExceeded(
                "max_events_per_run",
                f"cannot fork run {preview(req.run_id)}: the fork would start with "
                f"{len(plan.events) + 1} events, more than its tenant allows ({most})",
            )
        link = {
            "run_id": source.run_id,
            "seq": plan.cut,
            "step": plan.step,
            "by": principal.subject,
            "reason": req.reason,
            "copied": len(plan.events),
        }
        # A fork is nobody's child: its source's parent waits for the source alone. It is
        # started on the forking operator's behalf, not the source's starter's: the operator
        # may not decide the fork's approvals (segregation of duties), the source's starter may.
        # Its run timeout counts from the fork, not from its source's chain of generations.
        started = replace(
            RunStarted.parse(history[0]),
            parent=None,
            forked_from=link,
            started_by=normal_identity(principal.subject),
            run_deadline=None,
        )
        workflow, version, queue = _code_of(source, history[0])
        run_id = req.new_run_id if req.new_run_id is not None else new_run_id()
        if run_id == source.run_id:
            raise RunIdConflict(f"a fork needs a new run id, not its source's {preview(run_id)}")
        answer = await m.start_run(
            tenant=tenant,
            run_id=run_id,
            workflow=workflow,
            version=version,
            payload=source.input,
            started_data=started,
            queue=queue,
            priority=source.priority,
            history=plan.events,
            processed_seq=plan.processed_seq,
        )
        if not answer.created:
            link = await self._same_fork(tenant, run_id, link)
        await self._link_source(source, history, run_id, link)
        return Forked(run_id, link, answer.created)

    async def _same_fork(self, tenant: str, run_id: str, link: dict[str, Any]) -> dict[str, Any]:
        """The existing run `run_id`'s `forked_from` if it is this fork (same source and
        cut), else `RunIdConflict`."""
        _, events = await self.machinery.store.load_run(tenant, run_id)
        found = RunStarted.parse(events[0]).forked_from if events else None
        if not isinstance(found, dict) or (found.get("run_id"), found.get("seq")) != (
            link["run_id"],
            link["seq"],
        ):
            raise RunIdConflict(
                f"run {preview(run_id)} exists already and is not this fork of run "
                f"{preview(link['run_id'])} at event {link['seq']}; use another run id"
            )
        return found

    async def _link_source(
        self, source: RunRecord, history: list[Event], run_id: str, link: dict[str, Any]
    ) -> None:
        """Record the fork in an unfinished source's history, once: conditioned on the
        source's last event, so that of two identical forks at once one records it."""
        m = self.machinery
        forked = RunForked(
            to_run_id=run_id,
            seq=link["seq"],
            step=link["step"],
            by=link["by"],
            reason=link["reason"],
        )
        run: RunRecord | None = source
        for _ in range(_TRIES):
            if run is None or RunStatus(run.status).finished:
                return  # a finished history is closed: the fork's own link is the record
            if any(
                e.type == _E.RUN_FORKED and RunForked.parse(e).to_run_id == run_id for e in history
            ):
                return
            now = m.settings.clock()
            change = replace(operator_commit(run, forked, now), require_active=True)
            res = await m.commit(change)
            if res.conflict is not Conflict.SEQ:
                return
            run, history = await m.store.load_run(run.tenant, run.run_id)


def _code_of(source: RunRecord, started: Event) -> tuple[str, str, str]:
    """The workflow, version and queue a fork of `source` runs: a definition run stays
    on the version its RunStarted pinned (a fork copies nothing past a migration)."""
    first = RunStarted.parse(started)
    definition = first.definition
    if isinstance(definition, dict):
        return str(definition["name"]), str(definition["version"]), DEFINITIONS_QUEUE
    workflow = str(first.workflow or source.workflow)
    version = str(first.version or source.version)
    return workflow, version, workflow_queue(workflow, version)
