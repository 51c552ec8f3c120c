"""Hidden setups for the fragments of the docs.

`<!-- doc: fragment, setup NAME -->` before a block runs SETUPS[NAME] first, in the
same script and directory. A setup holding a line `# BLOCK` wraps the block instead
(the block takes that line's place and indentation; what follows runs after it). Each
setup builds only what the prose around its blocks has already shown the reader: the
order workflow of the README, an engine, a finished run, a pending approval.
"""

from __future__ import annotations

# The order the guide's fragments talk about: the README's, minus the week-long wait
# for "shipped", so that a run finishes in a moment. Three steps: charge, notify, a pause.
ORDER = """\
import asyncio
from datetime import timedelta

import waypost as wp
from waypost.model import operations as ops


class CardDeclined(Exception):
    pass


@wp.activity
def charge(ctx: wp.ActivityContext, order_id: str, cents: int = 0) -> dict:
    return {"id": f"ch_{order_id}", "cents": cents}


@wp.activity
async def notify(ctx: wp.ActivityContext, order_id: str) -> None:
    print(f"order {order_id} confirmed")


@wp.workflow(name="order")
async def order(ctx: wp.WorkflowContext, order: dict) -> dict:
    receipt = await ctx.run(charge, order["id"], order.get("cents", 0))
    await ctx.run(notify, order["id"])
    await ctx.sleep(timedelta(milliseconds=10))
    return {"status": "done", "receipt": receipt}
"""

ENGINE = (
    ORDER
    + """
url = "sqlite:///app.db"
engine = wp.Engine(url)
engine.register(order, charge, notify)
"""
)

# A run of the order that has finished, in the default tenant.
RUN = (
    ENGINE
    + """
with engine.running():
    run = engine.start(order, {"id": "o-1", "cents": 1299}, run_id="order-o-1")
    run.result(timeout=30)
run_id = run.run_id
"""
)

# Tenant acme exists, with a finished order run.
ACME = (
    ENGINE
    + """
engine.create_tenant("acme")
with engine.running():
    run = engine.start(order, {"id": "o-1"}, run_id="order-o-1", tenant="acme")
    run.result(timeout=30)
run_id = run.run_id
"""
)

# Tenant acme's run order-42, finished 40 days ago (the engine's clock is moved back
# while it runs), ready to be purged.
OLD_RUN = (
    ORDER
    + """
import time

shift = [-40 * 24 * 3600.0]
engine = wp.Engine("sqlite:///app.db", clock=lambda: time.time() + shift[0])
engine.register(order, charge, notify)
engine.create_tenant("acme")
with engine.running():
    engine.start(order, {"id": "o-42"}, run_id="order-42", tenant="acme").result(timeout=30)
shift[0] = 0.0
"""
)

# A purchase waiting for a quorum of managers; ann's notification gives
# approval_id and token (her approve link), as in the README's approval example.
APPROVAL = """\
import json
import time
from datetime import timedelta

import waypost as wp
from waypost.model import operations as ops


@wp.workflow(name="purchase")
async def purchase(ctx: wp.WorkflowContext, request: dict) -> dict:
    decision = await ctx.approval(
        "managers", approvers=wp.Quorum(2, group="managers"), data=request
    )
    return {"status": decision.outcome}


engine = wp.Engine("sqlite:///purchases.db", notifier=wp.FileSender("notifications.jsonl"))
engine.register(purchase)
engine.add_to_group("managers", ["ann", "bob", "cid"])
with engine.running():
    run = engine.start(purchase, {"item": "laptop", "cents": 189900}, started_by="eve")
    mail: dict = {}
    while "ann" not in mail:
        time.sleep(0.05)
        with open("notifications.jsonl", "a+") as f:
            f.seek(0)
            mail = {n["approver"]: n for n in map(json.loads, f)}
approval_id = mail["ann"]["approval_id"]
token = mail["ann"]["approve_token"]
"""

# A definition run waiting for its manager's approval, version 2 published since.
# The activities are the example's (examples/purchase_order_definition.py).
DEFINITION_RUN = """\
import waypost as wp
from examples.purchase_order_definition import (
    cancel_order, pay_invoice, place_order, release, reserve, waiting_at
)

engine = wp.Engine("sqlite:///definitions.db", poll_interval=0.05)
engine.register(reserve, release, place_order, cancel_order, pay_invoice)
engine.add_to_group("purchasing-managers", ["mia", "max"])
engine.publish(open("examples/definitions/purchase_order.yaml").read())
order = {"order_id": "PO-1", "amount": 2500, "requester": "rita", "supplier": "initech"}
with engine.running():
    run = engine.start("purchase_order", order)
    waiting_at(engine, run.run_id, "approval")
run_id = run.run_id
engine.publish(open("examples/definitions/purchase_order_v2.yaml").read())
"""

SETUPS: dict[str, str] = {
    "order": ORDER,
    "engine": ENGINE,
    "run": RUN,
    "acme": ACME,
    "old-run": OLD_RUN,
    "approval": APPROVAL,
    "definition-run": DEFINITION_RUN,
    # An engine that serves no code: a definition's activities are not checked.
    "bare-engine": 'import waypost as wp\n\nengine = wp.Engine("sqlite:///app.db")\n',
    # The body of a workflow, run to its end.
    "workflow-body": """\
import asyncio

import waypost as wp


@wp.activity
def fetch(ctx: wp.ActivityContext, name: str) -> str:
    return name.upper()


@wp.activity
def check_fraud(ctx: wp.ActivityContext, order: dict) -> None:
    pass


@wp.activity
def charge(ctx: wp.ActivityContext, order: dict) -> dict:
    return {"id": f"ch_{order['id']}"}


@wp.workflow(name="example")
async def example(ctx: wp.WorkflowContext, order: dict) -> str:
    # BLOCK
    return "done"


with wp.Engine("sqlite:///body.db") as engine:
    engine.register(example, fetch, check_fraud, charge)
    with engine.running():
        assert engine.start(example, {"id": "o-1"}).result(timeout=30) == "done"
""",
    # What the guide's typed workflow takes and returns.
    "order-types": """\
from dataclasses import dataclass

import waypost as wp


@dataclass
class Order:
    id: str
    cents: int


@dataclass
class Receipt:
    charge_id: str
""",
    # The replay example's saved history: a finished order's, written the way
    # `waypost runs history RUN_ID > run.jsonl` writes it, and a refund activity.
    "saved-history": (
        ENGINE
        + """
import json
import os


@wp.activity
def refund(ctx: wp.ActivityContext, order_id: str) -> None:
    pass


with engine.running():
    engine.start(order, {"id": "o-17"}, run_id="order-o-17").result(timeout=30)
os.makedirs("tests/histories")
with open("tests/histories/order-o-17.jsonl", "w") as saved:
    for ev in engine.history_page("order-o-17", after_seq=0, limit=1000).events:
        line = {"seq": ev.seq, "type": ev.type, "time": ev.time.isoformat(), "data": ev.data}
        print(json.dumps(line, sort_keys=True), file=saved)
"""
    ),
    # A webhook as a receiver gets it, signed with `secret` the way waypost signs.
    "signed-webhook": """\
import time
from types import SimpleNamespace

import waypost as wp
from waypost.features.signing import sign

secret = "whsec_example"
raw_body = b'{"order": "o-1"}'
url = "https://hooks.example.org/approvals"
now = int(time.time())
headers = {
    "webhook-id": "msg_1",
    "webhook-timestamp": str(now),
    "webhook-signature": sign(secret.encode(), "msg_1", now, "POST", url, raw_body),
}
request = SimpleNamespace(headers=headers)
""",
    # The cart workflow (the block before) served, with a run of it.
    "reserve": """\
import waypost as wp


@wp.activity
def reserve(ctx: wp.ActivityContext, sku: str) -> None:
    pass
""",
    "cart-run": """\
engine = wp.Engine("sqlite:///carts.db")
engine.register(cart, reserve)
with engine.running():
    run_id = engine.start(cart, "ann").run_id
    # BLOCK
""",
    # An engine serving (the block's calls need a worker to run the runs).
    "running": """\
with engine.running():
    # BLOCK
""",
    # The reminder workflow of the testing example.
    "reminder": """\
from datetime import timedelta

import waypost as wp


@wp.activity
def send_reminder(ctx: wp.ActivityContext, name: str) -> str:
    return f"reminded {name}"


@wp.workflow(name="remind")
async def remind(ctx: wp.WorkflowContext, name: str) -> str:
    await ctx.sleep(timedelta(days=3))
    return await ctx.run(send_reminder, name)
""",
}
