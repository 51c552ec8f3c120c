"""A purchase that any two managers must approve, with a refund when they reject.

Serve it with a worker and drive it from the command line (see the README):

    export PYTHONPATH=examples WAYPOST_DB=sqlite:///purchases.db
    waypost groups add managers ann bob cid
    waypost worker --app purchase_approval --notify file:notifications.jsonl &
    waypost start purchase '{"item": "laptop", "cents": 189900}' \\
        --app purchase_approval --started-by eve
    waypost approvals list --as ann
    waypost approve APPROVAL_ID --token TOKEN --as ann     # tokens: notifications.jsonl

Or run this file: it plays the whole story in one process.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import waypost as wp
from waypost.features.senders import FileSender


@wp.activity
def reserve_budget(ctx: wp.ActivityContext, item: str, cents: int) -> str:
    return f"budget-{ctx.idempotency_key[:8]}"


@wp.activity
def place_order(ctx: wp.ActivityContext, item: str) -> str:
    return f"order for {item} placed"


@wp.activity
def release_budget(ctx: wp.ActivityContext, reservation: str) -> str:
    return f"{reservation} released"


@wp.workflow(name="purchase")
async def purchase(ctx: wp.WorkflowContext, request: dict[str, Any]) -> dict[str, Any]:
    reservation = await ctx.run(reserve_budget, request["item"], request["cents"])
    decision = await ctx.approval(
        "managers",
        approvers=wp.Quorum(2, group="managers"),
        expires_in=timedelta(days=3),
        data={"item": request["item"], "cents": request["cents"]},
    )
    if not decision.approved:
        await ctx.run(release_budget, reservation)
        return {"status": decision.outcome, "by": decision.decided_by}
    return {"status": await ctx.run(place_order, request["item"]), "by": decision.decided_by}


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        mail = Path(tmp) / "notifications.jsonl"
        engine = wp.Engine(f"sqlite:///{tmp}/purchases.db", notifier=FileSender(mail))
        engine.register(purchase, reserve_budget, place_order, release_budget)
        engine.add_to_group("managers", ["ann", "bob", "cid"])
        with engine.running():
            run = engine.start(purchase, {"item": "laptop", "cents": 189900}, started_by="eve")
            notes: dict[str, dict[str, Any]] = {}
            deadline = time.monotonic() + 30
            while len(notes) < 3 and time.monotonic() < deadline:
                if mail.exists():
                    lines = mail.read_text().splitlines()
                    notes = {n["approver"]: n for n in map(json.loads, lines)}
                time.sleep(0.05)
            for who in ("ann", "bob"):
                note = notes[who]
                receipt = engine.decide(note["approval_id"], note["approve_token"], who, "approve")
                print(f"{who} approved: the approval is {receipt.outcome}")
            print(run.run_id, "->", run.result(timeout=30))
        engine.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
