"""An approval workflow and the reads that approval tests share."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import waypost as wp
from waypost.features.senders import FileSender
from waypost.model import approvals as ap_model, operations as ops
from waypost.store.base import NewCredential

from .db import db_query
from .history import of_type
from .mail import Mailbox
from .polling import eventually


@wp.workflow(name="purchase")
async def purchase(ctx: wp.WorkflowContext, req: dict[str, Any]) -> dict[str, Any]:
    decision = await ctx.approval(
        "manager",
        approvers=wp.Quorum(2, group="managers"),
        expires_in=req.get("expires_in", 3600),
        data={"amount": req["amount"]},
    )
    return {"outcome": decision.outcome, "by": sorted(decision.decided_by)}


def pending_approval(engine: Any, run_id: str, tenant: str | None = None) -> wp.ApprovalInfo:
    """The approval run `run_id` waits on (of `tenant`, if given), once there is one."""
    where = {} if tenant is None else {"tenant": tenant}

    def find() -> wp.ApprovalInfo | None:
        found = engine.approvals(run_id=run_id, **where)
        return found[0] if found else None

    info: wp.ApprovalInfo = eventually(find, f"the approval of run {run_id}")
    return info


def refusals(engine: Any, run_id: str) -> list[dict[str, Any]]:
    return [e.data for e in of_type(engine.history(run_id), "ApprovalRefused")]


def approver_credentials(engine: Any, approval_id: str, approver: str, order_by: str) -> list[str]:
    """The statuses of `approver`'s credentials for the approval, in `order_by` order."""
    rows = db_query(
        engine.url,
        "SELECT status FROM approval_credentials WHERE approval_id = ? AND approver = ?"
        f" ORDER BY {order_by}",
        (approval_id, approver),
    )
    return [r[0] for r in rows]


def credential_statuses(engine: Any, approval_id: str) -> list[tuple[Any, ...]]:
    """The distinct statuses of the approval's credentials, as rows."""
    return db_query(
        engine.url,
        "SELECT DISTINCT status FROM approval_credentials WHERE approval_id = ?",
        (approval_id,),
    )


@contextmanager
def behind_the_database(
    make_engine: Any, mailbox: Mailbox
) -> Iterator[tuple[Any, str, str, dict[str, Any]]]:
    """A running engine whose clock is an hour behind the database's, and a `purchase` run
    whose approval expires a minute after the engine's "now" (an hour before the
    database's): yields the engine, the run's id, the approval's id and ann's notification."""
    behind = make_engine(
        purchase, notifier=FileSender(mailbox.path), clock=lambda: time.time() - 3600
    )
    behind.add_to_group("managers", ["ann", "bob"])
    with behind.running():
        run = behind.start(purchase, {"amount": 5, "expires_in": 60})
        aid = pending_approval(behind, run.run_id).approval_id
        yield behind, run.run_id, aid, mailbox.wait(aid, "ann")


@contextmanager
def managers_engine(make_engine: Any, mailbox: Mailbox, *code: Any) -> Iterator[Any]:
    """A running engine serving `purchase` and `code`, its notifications in `mailbox`, with
    ann, bob and cid in the group `managers`."""
    eng = make_engine(purchase, *code, notifier=FileSender(mailbox.path))
    eng.add_to_group("managers", ["ann", "bob", "cid"])
    with eng.running():
        yield eng


def issue_credential(engine: Any, approval_id: str, who: str) -> str:
    """A fresh credential for `who`, as a redelivery makes one (the pair before it
    retires), written to the store directly; its token."""
    issued = ap_model.issue_credential()
    engine._call(
        engine.aio.store.issue_credentials(
            "default",
            approval_id,
            who,
            [NewCredential(issued.credential_id, "approve", issued.secret_hash)],
            engine.aio.clock(),
        )
    )
    token: str = issued.token
    return token


def approve_as_itself(approval_id: str, token: str) -> ops.Decide:
    """An approval by whoever executes it (no approver named), with `token`."""
    return ops.Decide(
        approval_id=approval_id,
        token=token,
        approver=None,  # type: ignore[arg-type]
        decision="approve",
    )
