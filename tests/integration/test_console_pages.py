"""The console's definitions pages and approvals inbox, over a real socket, on both stores.

Publishing reads a multipart upload and shows the validator's located problems;
deciding from the inbox goes through the door's `Decide` as the signed-in approver,
under the rules a notification link's decision obeys.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import waypost as wp
from tests.helpers import eventually

from .console_fixtures import Browser
from .server_fixtures import make_key, serve

__all__ = ["serve"]

pytestmark = pytest.mark.timeout(120)

EXAMPLES = Path(__file__).parents[2] / "examples" / "definitions"
PASSWORD = "correct horse battery"


@wp.workflow(name="spend")
async def spend(ctx: wp.WorkflowContext, amount: int) -> str:
    decision = await ctx.approval(
        "spend", approvers=wp.Quorum(2, group="managers"), data={"amount": amount}
    )
    return decision.outcome


@pytest.fixture
def site(make_engine: Any, serve: Any) -> Iterator[dict[str, Any]]:
    engine = make_engine(spend)
    with engine.running():
        base = serve(engine)
        keys = {
            "ops": make_key(engine, "acme", "olga", "operator", "starter"),
            "viewer": make_key(engine, "acme", "vic", "viewer"),
            "other": make_key(engine, "globex", "gus", "admin"),
        }
        for user in ("mia", "max", "rita"):
            engine.create_user(user, ["approver", "starter"], PASSWORD, tenant="acme")
        engine.add_to_group("managers", ["mia", "max", "rita"], tenant="acme")
        yield {"engine": engine, "base": base, **keys}


def signed_in(site: dict[str, Any], key: str | None = None, user: str | None = None) -> Browser:
    b = Browser(site["base"])
    answer = b.sign_in_key(site[key]) if key else b.sign_in_password("acme", user or "", PASSWORD)
    assert answer.status_code == 303, answer.text[:500]
    return b


def upload(b: Browser, name: str, body: bytes, *, csrf: str | None = None) -> Any:
    token = csrf if csrf is not None else b.csrf("/definitions")
    return b.http.post(
        "/definitions", data={"csrf": token}, files={"file": (name, body, "application/yaml")}
    )


# == definitions ==========================================================================
def test_publish_two_versions_then_see_graph_and_diff(site: dict[str, Any]) -> None:
    b = signed_in(site, "ops")
    v1 = (EXAMPLES / "purchase_order.yaml").read_bytes()
    answer = upload(b, "purchase_order.yaml", v1)
    assert answer.status_code == 303
    assert answer.headers["location"] == "/definitions/purchase_order?version=1&published=1"
    assert "Published as version 1." in b.get(answer.headers["location"]).text
    # The same content again makes no new version, and says so.
    again = upload(b, "again.yaml", v1)
    assert again.headers["location"].endswith("version=1&published=0")
    v2 = upload(b, "v2.yaml", (EXAMPLES / "purchase_order_v2.yaml").read_bytes())
    assert v2.headers["location"].startswith("/definitions/purchase_order?version=2")

    listing = b.get("/definitions").text
    assert 'href="/definitions/purchase_order"' in listing and "v2" in listing
    page = b.get("/definitions/purchase_order?version=1").text
    assert '<svg xmlns="http://www.w3.org/2000/svg" class="wp-graph"' in page
    assert 'data-step="manager_approval"' in page
    assert "name: purchase_order" in page  # the canonical text
    diff = b.get("/definitions/purchase_order/diff?old=1&new=2")
    assert diff.status_code == 200
    assert re.search(r'<tr class="(replace|insert|delete)">', diff.text)
    assert "v1" in diff.text and "v2" in diff.text


def test_an_invalid_definition_shows_every_located_problem_and_publishes_nothing(
    site: dict[str, Any],
) -> None:
    b = signed_in(site, "ops")
    answer = upload(b, "invalid.yaml", (EXAMPLES / "invalid.yaml").read_bytes())
    assert answer.status_code == 422
    assert "Not published: the definition is invalid." in answer.text
    problems = re.findall(r"<li><code>([^<]+)</code>: ", answer.text)
    assert len(problems) >= 2 and any(p.startswith("steps.") for p in problems)
    assert site["engine"].execute(wp_list_definitions(), local(site)) == []
    for name, body, words in [
        ("empty.yaml", b"  \n", "is empty"),
        ("binary.yaml", b"\xff\xfe\x00name: x", "definition"),
        ("huge.yaml", b"#" * 300_000, "bytes, the most a definition may have"),
        ("<script>.yaml", b"[1, 2", "Not published"),
    ]:
        refused = upload(b, name, body)
        assert refused.status_code == 422, name
        assert words in refused.text, (name, refused.text[:2000])
        assert "<script>.yaml" not in refused.text
    assert site["engine"].execute(wp_list_definitions(), local(site)) == []


def test_publishing_needs_an_operator_and_the_forms_csrf_token(site: dict[str, Any]) -> None:
    body = (EXAMPLES / "purchase_order.yaml").read_bytes()
    viewer = signed_in(site, "viewer")
    assert "Publish a version" not in viewer.get("/definitions").text
    refused = upload(viewer, "po.yaml", body, csrf=viewer.csrf("/runs"))
    assert refused.status_code == 403
    ops_ = signed_in(site, "ops")
    forged = upload(ops_, "po.yaml", body, csrf="forged")
    assert forged.status_code == 403
    cross = ops_.http.post(
        "/definitions",
        data={"csrf": ops_.csrf("/definitions")},
        files={"file": ("po.yaml", body)},
        headers={"Origin": "https://evil.example"},
    )
    assert cross.status_code == 403
    assert site["engine"].execute(wp_list_definitions(), local(site)) == []


def test_another_tenants_definition_is_not_found(site: dict[str, Any]) -> None:
    theirs = signed_in(site, "other")
    assert (
        upload(theirs, "po.yaml", (EXAMPLES / "purchase_order.yaml").read_bytes()).status_code
        == 303
    )
    mine = signed_in(site, "ops")
    assert "purchase_order" not in mine.get("/definitions").text
    assert mine.get("/definitions/purchase_order").status_code == 404
    assert mine.get("/definitions/purchase_order/diff").status_code == 404


# == approvals ============================================================================
def test_the_inbox_shows_an_approvers_pending_approvals_and_deciding_counts_once(
    site: dict[str, Any],
) -> None:
    engine = site["engine"]
    run = engine.start("spend", 700, tenant="acme", run_id="spend-1", started_by="rita")
    mia = signed_in(site, user="mia")
    inbox = eventually(lambda: (t := mia.get("/approvals").text) and "spend-1" in t and t)
    approval_id = re.search(r'data-approval="([^"]+)"', inbox)[1]  # type: ignore[index]
    page = mia.get(f"/approvals/{approval_id}").text
    assert "&#34;amount&#34;: 700" in page or '"amount": 700' in page
    assert "2 of group managers; the run&#39;s starter may not approve" in page

    token = mia.csrf(f"/approvals/{approval_id}")
    first = mia.http.post(
        f"/approvals/{approval_id}", data={"csrf": token, "decision": "approve", "comment": "ok"}
    )
    assert first.status_code == 200 and "Your vote is counted" in first.text
    twice = mia.http.post(f"/approvals/{approval_id}", data={"csrf": token, "decision": "approve"})
    assert twice.status_code == 409 and "Not recorded" in twice.text
    assert "spend-1" not in mia.get("/approvals").text  # decided: out of her inbox

    # The run's starter may not approve her own request (segregation of duties).
    rita = signed_in(site, user="rita")
    refused = rita.http.post(
        f"/approvals/{approval_id}",
        data={"csrf": rita.csrf("/approvals"), "decision": "approve"},
    )
    # Refused and recorded; the page then shows her no approval: one she may not decide
    # is, to an approver and nothing more, as absent as one that does not exist (404).
    assert refused.status_code in (403, 404, 409) and "Not recorded" in refused.text
    assert "started this run" in refused.text

    max_ = signed_in(site, user="max")
    done = max_.http.post(
        f"/approvals/{approval_id}", data={"csrf": max_.csrf("/approvals"), "decision": "approve"}
    )
    assert "The approval is approved" in done.text
    assert engine.result(run.run_id, timeout=30, tenant="acme") == "approved"
    # The audit says who decided and how they signed in (a console session, by password).
    decided = [e for e in engine.history(run.run_id, tenant="acme") if e.type == "ApprovalDecided"]
    assert [(e.data["principal"], e.data["auth"]) for e in decided] == [
        ("mia", "console-password"),
        ("max", "console-password"),
    ]


def test_deciding_needs_the_approver_role_the_csrf_token_and_this_tenant(
    site: dict[str, Any],
) -> None:
    engine = site["engine"]
    engine.start("spend", 5, tenant="acme", run_id="spend-2")
    mia = signed_in(site, user="mia")
    inbox = eventually(lambda: (t := mia.get("/approvals").text) and "spend-2" in t and t)
    approval_id = re.search(r'data-approval="([^"]+)"', inbox)[1]  # type: ignore[index]
    path = f"/approvals/{approval_id}"

    forged = mia.http.post(path, data={"csrf": "forged", "decision": "approve"})
    assert forged.status_code == 403
    cross = mia.http.post(
        path,
        data={"csrf": mia.csrf("/approvals"), "decision": "approve"},
        headers={"Sec-Fetch-Site": "cross-site"},
    )
    assert cross.status_code == 403
    operator = signed_in(site, "ops")  # sees the approval, may not decide it
    assert approval_id in operator.get("/approvals").text
    assert "Approve</button>" not in operator.get(path).text
    denied = operator.http.post(
        path, data={"csrf": operator.csrf("/approvals"), "decision": "approve"}
    )
    assert denied.status_code == 403
    other = signed_in(site, "other")
    assert other.get(path).status_code == 404
    assert approval_id not in other.get("/approvals").text
    odd = mia.http.post(path, data={"csrf": mia.csrf("/approvals"), "decision": "maybe"})
    assert odd.status_code == 422 and "decision must be" in odd.text
    approval = engine.execute(wp_get_approval(approval_id), local(site))
    assert approval.status == "pending" and approval.votes == []


def local(site: dict[str, Any]) -> Any:
    return site["engine"].aio.local("acme")


def wp_list_definitions() -> Any:
    from waypost.model import operations as ops

    return ops.ListDefinitions()


def wp_get_approval(approval_id: str) -> Any:
    from waypost.model import operations as ops

    return ops.GetApproval(approval_id=approval_id)
