"""Child runs in the store: started with their parent's decision, ended into its history.

A parent's decision that starts a child (its ChildStarted command) creates the child run
in the same transaction (`start_children`), with a link to the parent run and step. When
a run with a parent ends, whatever ends it (its own code, an operator's terminate, its
parent's close policy), the commit that records the end also appends the child's outcome
to the parent's history (ChildCompleted or ChildFailed) and makes the parent's workflow
task ready (`run_ended`): a crash between the two cannot happen, so the parent learns of
every end exactly once. A parent that ends first applies each open child's close policy
in its own ending commit: `cancel` asks the child to cancel (its code runs its
cleanup), `terminate` ends it at once, `abandon` leaves it running. What the parent is
told and what a close policy does are pure functions (`model/children.py`); this module
turns them into commits.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from waypost.errors import QuotaExceeded
from waypost.model.children import ChildClosing, child_closing, parent_told
from waypost.model.events import ChildFailed, NewEvent, RunStarted
from waypost.model.status import FINISHED

from ..children import ChildLink
from ..commits import CommitResult, CreateRunResult, RunCommit, Snapshot, WorkflowTaskOp
from ..effects import CloseRunApprovals, NewRun
from ..tx import Tx
from .definitions import get_definition

# `runs.commit_run` and `runs.create_run`, passed in (runs.py calls this module).
Commit = Callable[[Tx, RunCommit], CommitResult]
Create = Callable[[Tx, NewRun], CreateRunResult]
_FINISHED = frozenset(s.value for s in FINISHED)
# The most children a run's page lists (a run may have more).
MAX_LISTED_CHILDREN = 1000


def start_children(
    tx: Tx, c: RunCommit, runs: Sequence[NewRun], commit: Commit, create: Create
) -> None:
    """Create the children `c` starts (`runs`, with `create`), each linked to `c`'s run; a
    child whose run id is already another run's fails at once, into the parent's history."""
    for new in runs:
        link = new.parent
        if link is None:
            continue
        key = {"tenant": new.tenant, "run_id": new.run_id}
        if "definition" in new.started.data:
            pinned = _pin_definition(tx, new)
            if isinstance(pinned, dict):
                _deliver(
                    tx, commit, c.tenant, c.run_id, _not_started(link, new.run_id, pinned, c.now)
                )
                continue
            new = pinned
        try:
            with tx.savepoint():
                result = create(tx, new)
        except QuotaExceeded as exc:
            # Over the tenant's run quotas: the child fails to start, the parent goes on.
            error = {"type": "QuotaExceeded", "message": str(exc)}
            _deliver(tx, commit, c.tenant, c.run_id, _not_started(link, new.run_id, error, c.now))
            continue
        if result.created:
            tx.run(
                "set_run_parent",
                {
                    **key,
                    "parent_run_id": link.run_id,
                    "parent_step": link.step,
                    "parent_close": link.close,
                },
            )
            continue
        row = tx.one("run_parent", key)
        if row is not None and (row["parent_run_id"], row["parent_step"]) == (
            link.run_id,
            link.step,
        ):
            continue  # the same child, started again by a decision that was retried
        error = {
            "type": "RunIdConflict",
            "message": f"run {new.run_id!r} exists already and is not this step's child",
        }
        _deliver(tx, commit, c.tenant, c.run_id, _not_started(link, new.run_id, error, c.now))


def _pin_definition(tx: Tx, new: NewRun) -> NewRun | dict[str, Any]:
    """The child run of a definition's `call` step, pinned to the version it runs (the
    newest, unless the step named one) and that version's digest; or the error of a
    definition the tenant has not published."""
    asked = RunStarted.parse(new.started).definition or {}
    number = asked.get("version")
    record = get_definition(tx, new.tenant, new.workflow, None if number is None else int(number))
    if record is None:
        which = "" if number is None else f" version {number}"
        return {
            "type": "DefinitionNotFound",
            "message": f"tenant {new.tenant!r} has no definition {new.workflow!r}{which}",
        }
    version = str(record.version)
    pinned = {
        "name": new.workflow,
        "version": record.version,
        "digest": record.digest,
        "limits": asked.get("limits") or {},
    }
    started = dataclasses.replace(RunStarted.parse(new.started), version=version, definition=pinned)
    return dataclasses.replace(new, version=version, started=started.at(new.started.ts))


def _not_started(link: ChildLink, run_id: str, error: dict[str, Any], now: float) -> NewEvent:
    return ChildFailed(step=link.step, run_id=run_id, status="not_started", error=error).at(now)


def run_ended(tx: Tx, c: RunCommit, snap: Snapshot, commit: Commit) -> None:
    """`c` ended its run as `snap` says: tell its parent, and close its open children, as
    the policies of `model/children.py` say (each change made with `commit`, the store's
    `commit_run`)."""
    key = {"tenant": c.tenant, "run_id": c.run_id}
    row = tx.one("run_parent", key)
    if row is not None and row["parent_run_id"] and not row["parent_told"]:
        # Told once: a child that a repair made run again and end again is not news.
        tx.run("parent_told", key)
        told = parent_told(row["parent_step"], c.run_id, snap.status, snap.result, snap.error)
        _deliver(tx, commit, c.tenant, row["parent_run_id"], told.at(c.now))
    for child in tx.all("run_children", {**key, "limit": MAX_LISTED_CHILDREN}):
        closing = child_closing(c.run_id, snap.status, child["parent_close"], child["status"])
        if closing is not None:
            commit(tx, _closing_commit(c, child, closing))


def _deliver(tx: Tx, commit: Commit, tenant: str, parent_run_id: str, event: NewEvent) -> None:
    """Append `event` to the parent's history and wake it, if the parent still runs."""
    head = tx.one("run_head", {"tenant": tenant, "run_id": parent_run_id})
    if head is None or head["status"] in _FINISHED:
        return  # the parent ended first (and closed or abandoned its children)
    commit(
        tx,
        RunCommit(
            tenant=tenant,
            run_id=parent_run_id,
            events=[event],
            now=event.ts,
            workflow_op=WorkflowTaskOp.WAKE,
        ),
    )


def _closing_commit(c: RunCommit, child: Any, closing: ChildClosing) -> RunCommit:
    """The commit that applies `closing` to `child` (a row of `run_children`) of `c`'s run:
    the child ended at once, or woken to run its cancellation."""
    events = [closing.event.at(c.now)]
    if closing.ends is None:
        return RunCommit(c.tenant, child["run_id"], events, c.now, workflow_op=WorkflowTaskOp.WAKE)
    processed = int(child["processed_seq"])
    return RunCommit(
        c.tenant,
        child["run_id"],
        events,
        c.now,
        snapshot=Snapshot(closing.ends.value, [], processed, error=closing.error, finished=True),
        workflow_op=WorkflowTaskOp.DELETE,
        effects=(CloseRunApprovals("cancelled"),),
    )


def run_links(tx: Tx, tenant: str, run_id: str) -> dict[str, Any] | None:
    """A run's parent (None if it has none) and children, for the run's page."""
    key = {"tenant": tenant, "run_id": run_id}
    row = tx.one("run_parent", key)
    if row is None:
        return None
    parent = (
        {"run_id": row["parent_run_id"], "step": row["parent_step"], "close": row["parent_close"]}
        if row["parent_run_id"]
        else None
    )
    children = [
        {
            "run_id": ch["run_id"],
            "step": ch["parent_step"],
            "workflow": ch["workflow"],
            "version": ch["version"],
            "status": ch["status"],
            "close": ch["parent_close"],
        }
        for ch in tx.all("run_children", {**key, "limit": MAX_LISTED_CHILDREN})
    ]
    return {"parent": parent, "children": children}
