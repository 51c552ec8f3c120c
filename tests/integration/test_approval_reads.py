"""Who reads an approval, and whether its id gives it away, on both stores over HTTP.

An approver's key reads only the approvals it may decide now or has decided: any other
approval of its tenant answers 404 exactly as one that does not exist, whatever else the
key may do that is not reading approvals (starting runs, say). Approval ids are random,
so knowing a run and its step does not give its approval's id.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import waypost as wp
from tests.helpers import eventually, of_type
from tests.helpers.approvals import pending_approval
from tests.helpers.mail import Mailbox
from waypost.features.senders import FileSender
from waypost.model import approvals as ap_model

from .server_fixtures import Api, make_key, serve

__all__ = ["serve"]

pytestmark = pytest.mark.timeout(120)


@wp.workflow(name="reads_ask")
async def ask(ctx: wp.WorkflowContext, who: str) -> dict[str, Any]:
    decision = await ctx.approval("ok", approvers=wp.AnyOf(users=[who]), data={"for": who})
    return {"outcome": decision.outcome, "approval_id": decision.approval_id}


@pytest.fixture
def setup(make_engine: Any, serve: Any, tmp_path: Path) -> Iterator[dict[str, Any]]:
    mailbox = Mailbox(tmp_path / "notes.jsonl")
    engine = make_engine(ask, notifier=FileSender(mailbox.path), cache_size=0)
    with engine.running():
        base = serve(engine)
        keys = {
            "bob": make_key(engine, "acme", "bob", "approver"),
            "bob-starter": make_key(engine, "acme", "bob", "approver", "starter"),
            "vera": make_key(engine, "acme", "vera", "viewer"),
            "olga": make_key(engine, "acme", "olga", "operator"),
        }
        yield {"engine": engine, "base": base, "keys": keys, "mailbox": mailbox}


def api(setup: dict[str, Any], who: str) -> Api:
    return Api(setup["base"], setup["keys"][who])


def test_an_approver_reads_only_the_approvals_it_may_decide_or_has_decided(
    setup: dict[str, Any],
) -> None:
    engine: wp.Engine = setup["engine"]
    anns = engine.start(ask, "ann", tenant="acme", started_by="sam")
    bobs = engine.start(ask, "bob", tenant="acme", started_by="sam")
    ann_ap = pending_approval_of(engine, anns.run_id)
    bob_ap = pending_approval_of(engine, bobs.run_id)
    missing = "ap_" + "0" * 32
    for who in ("bob", "bob-starter"):
        with api(setup, who) as bob:
            # Another's approval answers exactly what one that does not exist answers.
            theirs = bob.get(f"/v1/approvals/{ann_ap}")
            nothing = bob.get(f"/v1/approvals/{missing}")
            assert theirs.status_code == nothing.status_code == 404
            assert theirs.json()["error"]["code"] == nothing.json()["error"]["code"]
            assert theirs.json()["error"]["message"] == nothing.json()["error"]["message"].replace(
                missing, ann_ap
            )
            assert ann_ap not in {
                a["approval_id"] for a in bob.get("/v1/approvals").json()["approvals"]
            }
            mine = bob.get(f"/v1/approvals/{bob_ap}")
            assert mine.status_code == 200 and mine.json()["data"] == {"for": "bob"}
    # Readers of approvals read every one.
    for who in ("vera", "olga"):
        with api(setup, who) as reader:
            assert reader.get(f"/v1/approvals/{ann_ap}").status_code == 200
            assert reader.get(f"/v1/approvals/{missing}").status_code == 404
    # Once bob has decided his, he still reads it (closed); ann's, closed, stays hidden.
    with api(setup, "bob") as bob:
        answer = bob.post(f"/v1/approvals/{bob_ap}/decision", json={"decision": "approve"})
        assert answer.status_code == 200, answer.text
        assert bob.get(f"/v1/approvals/{bob_ap}").json()["status"] == "approved"
    ann_note = setup["mailbox"].wait(ann_ap, "ann")
    engine.decide(ann_ap, ann_note["reject_token"], "ann", "reject", tenant="acme")
    with api(setup, "bob") as bob:
        assert bob.get(f"/v1/approvals/{ann_ap}").status_code == 404


def pending_approval_of(engine: wp.Engine, run_id: str) -> str:
    approval_id: str = pending_approval(engine, run_id, tenant="acme").approval_id
    return approval_id


def test_approval_ids_are_random_and_replay_keeps_the_recorded_one(
    setup: dict[str, Any],
) -> None:
    engine: wp.Engine = setup["engine"]  # cache_size=0: every step replays the history
    first = engine.start(ask, "ann", tenant="acme", run_id="same-run")
    other = engine.start(ask, "ann", tenant="globex", run_id="same-run")
    first_ap = pending_approval(engine, first.run_id, tenant="acme").approval_id
    requested = of_type(engine.history(first.run_id, tenant="acme"), "ApprovalRequested")[0]
    step = requested.data["step"]
    # Not the hash of tenant, run and step that ids used to be, nor anything else derivable.
    assert first_ap == requested.data["approval_id"]
    assert first_ap != ap_model.approval_id_for("acme", "same-run", step)
    assert first_ap.startswith("ap_") and len(first_ap) == 3 + 32
    globex = eventually(
        lambda: engine.approvals(run_id=other.run_id, tenant="globex"), "globex's approval"
    )
    assert globex[0].approval_id not in (
        first_ap,
        ap_model.approval_id_for("globex", "same-run", step),
    )
    # Decided by its recorded id, after replays from the store: the run ends with that id.
    note = setup["mailbox"].wait(first_ap, "ann")
    engine.decide(first_ap, note["approve_token"], "ann", "approve", tenant="acme")
    assert engine.result(first.run_id, timeout=30, tenant="acme") == {
        "outcome": "approved",
        "approval_id": first_ap,
    }
