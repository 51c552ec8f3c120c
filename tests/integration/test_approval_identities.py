"""Nobody decides as someone else, and every vote says how its voter was known, on both
stores over HTTP.

A tenant admin may not make a console user (or an API key) whose name is already another
person's identity in the tenant: a key's principal, a member of a group, an approver a
pending approval names, a user. Names are compared in their normal form, so a look-alike
spelling is the same person. The platform operator (the embedded API, the command line)
may. Every vote and every refused decision records the credential that authenticated its
caller: the API key's id, the console user's account, the approval link's credential.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import waypost as wp
from tests.helpers import of_type
from tests.helpers.approvals import pending_approval
from tests.helpers.mail import Mailbox
from waypost.features.senders import FileSender
from waypost.model import operations as ops
from waypost.model.identity import Principal, Role

from .server_fixtures import Api, make_key, serve

__all__ = ["serve"]

pytestmark = pytest.mark.timeout(120)

PASSWORD = "correct horse battery"


@wp.workflow(name="ids_ask")
async def ask(ctx: wp.WorkflowContext, req: Any = None) -> str:
    decision = await ctx.approval("ok", approvers=wp.AnyOf(users=["pat"], groups=["managers"]))
    return decision.outcome


@pytest.fixture
def site(make_engine: Any, serve: Any, tmp_path: Path) -> Iterator[dict[str, Any]]:
    mailbox = Mailbox(tmp_path / "notes.jsonl")
    engine = make_engine(ask, notifier=FileSender(mailbox.path))
    with engine.running():
        base = serve(engine)
        keys = {
            "ada": make_key(engine, "acme", "ada", "admin"),
            "kate": make_key(engine, "acme", "kate", "starter"),
            "ann": make_key(engine, "acme", "ann", "approver"),
        }
        engine.add_to_group("managers", ["ann", "bob"], tenant="acme")
        engine.create_user("uma", ["viewer"], PASSWORD, tenant="acme")
        run = engine.start(ask, tenant="acme", started_by="sam")
        yield {
            "engine": engine,
            "base": base,
            "keys": keys,
            "mailbox": mailbox,
            "run_id": run.run_id,
        }


def users(api: Api) -> set[str]:
    return {u["name"] for u in api.get("/v1/users").json()["users"]}


def test_a_tenant_admin_may_not_make_a_user_of_another_persons_name(
    site: dict[str, Any],
) -> None:
    engine: wp.Engine = site["engine"]
    pending_approval(engine, site["run_id"], tenant="acme")
    with Api(site["base"], site["keys"]["ada"]) as admin:
        before = users(admin)
        for name, what in (
            ("kate", "the principal of an API key"),
            ("KATE", "the principal of an API key"),  # one person, however spelt
            ("bob", "a member of group 'managers'"),
            ("\u0430nn", "the principal of an API key"),  # a Cyrillic look-alike of ann
            ("pat", "an approver of pending approval"),
        ):
            body = {"name": name, "roles": ["approver"], "password": PASSWORD}
            answer = admin.post("/v1/users", json=body)
            assert answer.status_code == 409, (name, answer.text)
            error = answer.json()["error"]
            assert error["code"] == "identity_taken" and what in error["message"], error
            assert users(admin) == before  # nothing written
        # A user that exists is what it always was.
        answer = admin.post(
            "/v1/users", json={"name": "uma", "roles": ["viewer"], "password": PASSWORD}
        )
        assert (answer.status_code, answer.json()["error"]["code"]) == (409, "user_exists")
        # A name that is nobody's yet, the admin's own (a second credential of its own),
        # and one that is someone's in another tenant only (tenants are walls).
        make_key(engine, "globex", "gus", "approver")
        for name in ("rita", "ada", "gus"):
            body = {"name": name, "roles": ["viewer"], "password": PASSWORD}
            assert admin.post("/v1/users", json=body).status_code == 201, name
        assert users(admin) == before | {"rita", "ada", "gus"}
    # The platform operator may give a person who has a key a console user too.
    assert engine.create_user("kate", ["starter"], PASSWORD, tenant="acme").name == "kate"


def test_a_tenant_admin_may_not_make_a_key_for_another_persons_name(
    site: dict[str, Any],
) -> None:
    engine: wp.Engine = site["engine"]
    admin = Principal("acme", "ada", frozenset({Role.ADMIN}))
    for name in ("ann", "bob", "uma", "kate"):
        with pytest.raises(wp.IdentityTaken, match="may not make an API key"):
            engine.execute(ops.CreateKey(principal=name, roles=["approver"]), admin)
    assert {k.principal for k in engine.list_keys(tenant="acme")} == {"ada", "kate", "ann"}
    engine.execute(ops.CreateKey(principal="ada", roles=["viewer"]), admin)
    engine.execute(ops.CreateKey(principal="nova", roles=["viewer"]), admin)
    # The embedded API (the platform operator) rotates ann's key.
    engine.create_key("ann", ["approver"], tenant="acme")


def test_every_vote_records_the_credential_that_authenticated_it(site: dict[str, Any]) -> None:
    engine: wp.Engine = site["engine"]
    approval_id = pending_approval(engine, site["run_id"], tenant="acme").approval_id
    ann_key_id = site["keys"]["ann"].split("_")[1]
    # sam, the starter, signed in with a password at the console: refused, and the refusal
    # says through which account.
    engine.add_to_group("managers", ["sam"], tenant="acme")
    engine.create_user("sam", ["approver"], PASSWORD, tenant="acme")
    session = engine.execute(
        ops.SignIn(tenant="acme", user="sam", password=PASSWORD), Principal.anonymous()
    )
    sam = engine.execute(ops.ResolveSession(token=session.token), Principal.anonymous())
    assert sam.principal.credential == "user:sam"
    with pytest.raises(wp.DecisionRefused, match="sam started this run"):
        engine.execute(ops.Decide(approval_id=approval_id, decision="approve"), sam.principal)
    # ann, with her API key, over HTTP.
    with Api(site["base"], site["keys"]["ann"]) as ann:
        answer = ann.post(f"/v1/approvals/{approval_id}/decision", json={"decision": "approve"})
        assert answer.status_code == 200, answer.text
    info = engine.approval(approval_id, tenant="acme")
    (vote,) = info.votes
    assert (vote["principal"], vote["auth"], vote["authenticated_by"]) == (
        "ann",
        "api-key",
        f"key:{ann_key_id}",
    )
    (refusal,) = [r for r in info.refusals if r["principal"] == "sam"]
    assert (refusal["auth"], refusal["authenticated_by"]) == ("console-password", "user:sam")
    history = engine.history(site["run_id"], tenant="acme")
    decided = of_type(history, "ApprovalDecided")[-1].data
    assert decided["authenticated_by"] == f"key:{ann_key_id}"
    assert decided["votes"][0]["authenticated_by"] == f"key:{ann_key_id}"
    refused = [e.data for e in of_type(history, "ApprovalRefused")]
    assert [r["authenticated_by"] for r in refused] == ["user:sam"]


def test_a_vote_by_an_approval_link_records_the_links_credential(
    make_engine: Any, tmp_path: Path
) -> None:
    mailbox = Mailbox(tmp_path / "notes.jsonl")
    engine = make_engine(ask, notifier=FileSender(mailbox.path))
    engine.add_to_group("managers", ["ann"])
    with engine.running():
        run = engine.start(ask, started_by="sam")
        approval = pending_approval(engine, run.run_id)
        token = mailbox.wait(approval.approval_id, "ann")["approve_token"]
        # As the approval page decides: the link's approver, authenticated by the link.
        view = engine.resolve_credential(token)
        page = Principal(view.tenant, view.approver, frozenset({Role.APPROVER}))
        engine.execute(
            ops.Decide(
                approval_id=approval.approval_id, token=token, decision="approve", auth="page"
            ),
            page,
        )
        (vote,) = engine.approval(approval.approval_id).votes
        credential_id = token.split(".")[0]
        assert (vote["auth"], vote["authenticated_by"]) == ("page", f"link:{credential_id}")
