"""An approver opens a notification's link in a real browser, confirms, and the run goes on.

The notification comes from the server's file sender, as mail would; the page is
the server's (`/approve/...`), served on a real socket. The same pages checked at a
phone's width: nothing wider than the screen.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import waypost as wp
from tests.browser.conftest import PHONE, fits_width, screenshot
from tests.helpers import eventually
from tests.integration.server_fixtures import serve
from waypost.features.senders import FileSender

__all__ = ["serve"]

pytestmark = pytest.mark.timeout(120)


@wp.workflow(name="expense")
async def expense(ctx: wp.WorkflowContext, claim: dict[str, Any]) -> dict[str, Any]:
    decision = await ctx.approval(
        "manager",
        approvers=wp.AnyOf(users=["mia"]),
        expires_in=3600,
        data={"claim": claim["id"], "amount": claim["amount"], "note": claim.get("note", "")},
    )
    return {"outcome": decision.outcome, "by": sorted(decision.decided_by)}


def link_for(notes: Path, run_id: str, action: str, base: str) -> str:
    """The approver's link from the notifications file, pointed at the served port."""

    def find() -> str | None:
        if not notes.exists():
            return None
        for line in notes.read_text().splitlines():
            note = json.loads(line)
            if note["run_id"] == run_id:
                link: str = note[f"{action}_url"]
                return base + link[link.index("/approve/") :]
        return None

    found: str = eventually(find, f"the notification of {run_id}")
    return found


@pytest.fixture
def engine(sqlite_url: str, tmp_path: Path) -> Any:
    notes = tmp_path / "notifications.jsonl"
    eng = wp.Engine(sqlite_url, notifier=FileSender(notes), lease=2.0, poll_interval=0.05)
    eng.register(expense)
    with eng.running():
        yield eng, notes
    eng.close()


@pytest.fixture
def server(engine: Any, serve: Any) -> Any:
    """The engine served on a real socket (the server stops before the engine closes)."""
    eng, notes = engine
    return eng, serve(eng), notes


def test_the_link_in_the_notification_approves_and_the_run_goes_on(server: Any, page: Any) -> None:
    engine, base, notes = server
    run = engine.start(
        "expense", {"id": "EX-7", "amount": 120, "note": "<b>taxi</b>"}, run_id="ex-7"
    )
    page.goto(link_for(notes, run.run_id, "approve", base))
    assert page.locator("h1").inner_text() == "Approve \u201cmanager\u201d?"
    assert "<b>taxi</b>" in page.locator("pre.data").inner_text()  # shown as text, not markup
    assert page.locator("pre.data b").count() == 0
    screenshot(page, "approval-page")
    page.fill("#comment", "fine")
    with page.expect_navigation():
        page.click("form.decide button")
    assert "Approved" in page.content() or "approved" in page.content()
    screenshot(page, "approval-decided")
    assert engine.result(run.run_id, timeout=30) == {"outcome": "approved", "by": ["mia"]}

    # The link was single-use: opening it again shows the one page for unusable links.
    page.goto(link_for(notes, run.run_id, "approve", base))
    assert "cannot be used" in page.content()


def test_a_forged_form_without_the_pages_csrf_cookie_records_nothing(
    server: Any, new_page: Any
) -> None:
    engine, base, notes = server
    run = engine.start("expense", {"id": "EX-8", "amount": 5}, run_id="ex-8")
    link = link_for(notes, run.run_id, "approve", base)
    # Another page posts to the link with a token it guessed; the browser has no cookie of
    # the approval page, so the server refuses it and the run still waits.
    forger = new_page()
    forger.set_content(
        f'<form method="post" action="{link}"><input name="csrf" value="guess">'
        "<button>go</button></form>"
    )
    with forger.expect_navigation():
        forger.click("button")
    assert "Nothing was recorded" in forger.content()
    assert engine.get(run.run_id).status == wp.RunStatus.WAITING


@pytest.mark.parametrize("action", ["approve", "reject"])
def test_the_approval_pages_fit_a_phone(server: Any, new_page: Any, action: str) -> None:
    engine, base, notes = server
    long_note = "a-very-long-word-without-spaces-" * 20
    run = engine.start(
        "expense", {"id": "EX-9", "amount": 99, "note": long_note}, run_id=f"ex-9-{action}"
    )
    phone = new_page(viewport=PHONE, is_mobile=True, has_touch=True)
    phone.goto(link_for(notes, run.run_id, action, base))
    assert fits_width(phone)
    button = phone.locator("form.decide button")
    box = button.bounding_box()
    assert box is not None and box["height"] >= 40 and box["width"] <= PHONE["width"]
    screenshot(phone, f"approval-page-phone-{action}")
    phone.fill("#comment", "checked on my phone")
    with phone.expect_navigation():
        button.tap()
    assert fits_width(phone)
    outcome = "approved" if action == "approve" else "rejected"
    assert engine.result(run.run_id, timeout=30)["outcome"] == outcome
