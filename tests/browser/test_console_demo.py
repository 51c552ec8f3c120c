"""The README's main command, driven from a real browser: `./scripts/server` serves the
console; a new user signs in with what it printed, approves a demo order (from the
notification's link, and from the inbox), watches the runs go on, and an operator
terminates one with a reason. Forged and unauthorised forms are refused.

The server is the real one, a subprocess on a free port and a database of its own.
Screenshots of the main pages go to build/screenshots/.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.browser.conftest import PHONE, fits_width, screenshot
from tests.helpers import eventually
from tests.helpers.servers import free_port

pytestmark = pytest.mark.timeout(240)

ROOT = Path(__file__).parents[2]


class Demo:
    def __init__(self, base: str, output: Path, notes: Path) -> None:
        self.base = base
        self.output = output
        self.notes = notes

    def printed(self) -> str:
        return self.output.read_text(errors="replace")

    @property
    def password(self) -> str:
        return re.search(r"password: (\S+)", self.printed())[1]  # type: ignore[index]

    @property
    def key(self) -> str:
        return re.search(r"API key: (wpk_\S+)", self.printed())[1]  # type: ignore[index]

    def link(self, run_id: str, approver: str, action: str = "approve") -> str:
        """The approver's link for `run_id` from the notifications file, as mail brings it."""

        def find() -> str | None:
            for line in self.notes.read_text().splitlines():
                note = json.loads(line)
                if note["run_id"] == run_id and note["approver"] == approver:
                    link: str = note[f"{action}_url"]
                    return link
            return None

        found: str = eventually(find, f"{approver}'s notification for {run_id}", timeout=30)
        return found


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[Demo]:
    port = free_port()
    output = tmp_path / "server.out"
    notes = tmp_path / "notifications.jsonl"
    env = {
        **os.environ,
        "WAYPOST_DB": f"sqlite:///{tmp_path / 'demo.db'}",
        "WAYPOST_SERVER_NOTES": str(notes),
    }
    with output.open("wb") as out:
        process = subprocess.Popen(
            [
                str(ROOT / "scripts" / "server"),
                "--port",
                str(port),
                "--approval-url",
                f"http://127.0.0.1:{port}",
            ],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"the server stopped:\n{output.read_text()}")
        try:
            with httpx.Client() as client:
                return client.get(f"{base}/readyz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        eventually(ready, "./scripts/server to serve", timeout=120)
        yield Demo(base, output, notes)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def sign_in(page: Any, base: str, *, user: str = "", password: str = "", key: str = "") -> None:
    page.goto(f"{base}/")
    assert "/sign-in" in page.url  # signed out: sent to sign in
    if key:
        form = page.locator("form", has=page.locator("input[name=key]"))
        form.locator("input[name=key]").fill(key)
    else:
        form = page.locator("form", has=page.locator("input[name=user]"))
        form.locator("input[name=tenant]").fill("demo")
        form.locator("input[name=user]").fill(user)
        form.locator("input[name=password]").fill(password)
    form.locator("button").click()
    page.wait_for_url(re.compile(r".*/runs.*"))


def fresh(page: Any) -> bool:
    """Load the page again (for a check that waits for what it shows to change)."""
    page.reload()
    return True


def run_status(page: Any, base: str, run_id: str) -> str:
    page.goto(f"{base}/runs/{run_id}")
    status: str = page.locator("dl.facts .status").first.inner_text()
    return status


def step_state(page: Any, step: str) -> str:
    state: str = page.locator(f'svg.wp-graph g[data-step="{step}"]').get_attribute("data-state")
    return state


def test_a_new_user_signs_in_approves_and_watches_the_runs_go_on(demo: Demo, new_page: Any) -> None:
    page = new_page()
    sign_in(page, demo.base, user="mia", password=demo.password)
    assert "mia" in page.locator("header .who").inner_text()
    eventually(lambda: fresh(page) and "demo-po-1" in page.content(), "the demo runs", 30)
    screenshot(page, "console-runs")

    # Her inbox: the two orders that wait for a manager.
    page.click("header nav >> text=Approvals")
    eventually(
        lambda: fresh(page) and page.locator("section.approval").count() == 2,
        "two approvals in mia's inbox",
        30,
    )
    assert "demo-po-1" in page.content() and "demo-po-2" in page.content()
    screenshot(page, "console-approvals")

    # Find a waiting run in the runs list (the failed order is not among them), open it:
    # its page explains the wait and draws the definition with the step waiting.
    page.click("header nav >> text=Runs")
    with page.expect_navigation():
        page.click("ul.counts a[href='/runs?status=waiting']")
    listed = page.locator("#runs").inner_text()
    assert "demo-po-1" in listed and "demo-po-4" not in listed
    with page.expect_navigation():
        page.click("#runs a[href='/runs/demo-po-1']")
    assert page.locator("dl.facts .status").first.inner_text() == "waiting"
    assert step_state(page, "manager_approval") == "waiting"
    assert step_state(page, "reserve_budget") == "completed"
    assert step_state(page, "needs_approval") == "completed"  # a choice: passed
    assert step_state(page, "place_order") == ""  # not reached
    assert "approval" in page.locator("dl.facts").inner_text()
    screenshot(page, "console-run")
    screenshot(page, "console", full_page=False)  # the tour's (docs/img/console.png)

    # Approve demo-po-1 from the notification's link, in the same browser.
    page.goto(demo.link("demo-po-1", "mia"))
    page.fill("#comment", "within budget")
    with page.expect_navigation():
        page.click("form.decide button")
    assert "approved" in page.content().lower()
    # ... and watch the run go on: the order is placed, the run waits for the goods.
    eventually(
        lambda: (
            run_status(page, demo.base, "demo-po-1") == "waiting"
            and step_state(page, "await_goods") == "waiting"
        ),
        "demo-po-1 to go on to await_goods",
        30,
    )
    assert step_state(page, "manager_approval") == "completed"
    assert step_state(page, "place_order") == "completed"
    screenshot(page, "console-run-after-approval")

    # Approve demo-po-2 from the console's inbox instead.
    page.goto(f"{demo.base}/approvals")
    page.locator("section.approval", has_text="demo-po-2").locator("a").last.click()
    screenshot(page, "console-approval")
    page.fill("#comment", "ok from the console")
    with page.expect_navigation():
        page.click("button[value=approve]")
    assert "The approval is approved" in page.locator(".notice").inner_text()
    eventually(
        lambda: (
            run_status(page, demo.base, "demo-po-2") == "waiting"
            and step_state(page, "await_goods") == "waiting"
        ),
        "demo-po-2 to go on to await_goods",
        30,
    )
    page.goto(f"{demo.base}/approvals")
    assert page.locator("section.approval").count() == 0

    # Mia is an approver, not an operator: a terminate form she builds with her own
    # valid CSRF token is refused by the door, and the run is untouched.
    page.goto(f"{demo.base}/runs/demo-po-3")
    assert page.locator("form[action$='/commands/terminate']").count() == 0
    csrf = page.locator("input[name=csrf]").first.get_attribute("value")
    with page.expect_navigation():
        page.evaluate(
            """([action, csrf]) => {
            const f = document.createElement('form');
            f.method = 'post'; f.action = action;
            for (const [k, v] of [['csrf', csrf], ['reason', 'not mine to end']]) {
                const i = document.createElement('input'); i.name = k; i.value = v; f.appendChild(i);
            }
            document.body.appendChild(f); f.submit();
        }""",
            [f"{demo.base}/runs/demo-po-3/commands/terminate", csrf],
        )
    assert "Terminate: not done" in page.content()
    assert run_status(page, demo.base, "demo-po-3") == "waiting"


def test_an_operator_terminates_a_run_with_a_reason_and_forged_forms_are_refused(
    demo: Demo, new_page: Any
) -> None:
    page = new_page()
    sign_in(page, demo.base, key=demo.key)
    eventually(
        lambda: run_status(page, demo.base, "demo-po-3") == "waiting", "demo-po-3 to wait", 30
    )

    # A page of another site posts a terminate form into the console, where the browser
    # is signed in: the session cookie (SameSite) does not go with it, and the token is
    # not the session's, so nothing is done.
    forger = page.context.new_page()
    forger.set_content(
        f'<form method="post" action="{demo.base}/runs/demo-po-3/commands/terminate">'
        '<input name="csrf" value="guessed"><input name="reason" value="forged">'
        "<button>go</button></form>"
    )
    with forger.expect_navigation():
        forger.click("button")
    assert "nothing was done" in forger.content().lower()
    forger.close()
    assert run_status(page, demo.base, "demo-po-3") == "waiting"

    # The operator's own form, in the actions menu, with a reason and its confirmation.
    page.click("details.actions > summary")
    page.click("details[data-command=terminate] > summary")
    form = page.locator("form[action$='/commands/terminate']")
    form.locator("input[name=reason]").fill("order withdrawn by the requester")
    form.locator("input[name=confirm]").check()
    screenshot(page, "console-run-terminate")
    with page.expect_navigation():
        form.locator("button").click()
    assert "Terminate: done." in page.locator(".notice").inner_text()
    assert run_status(page, demo.base, "demo-po-3") == "terminated"
    assert "order withdrawn by the requester" in page.content()  # in the history

    # The suspended page and the definitions pages, for the record.
    page.goto(f"{demo.base}/definitions/purchase_order")
    assert page.locator("svg.wp-graph g[data-step]").count() == 10
    screenshot(page, "console-definition")
    page.goto(f"{demo.base}/definitions")
    page.set_input_files("input[name=file]", str(ROOT / "examples/definitions/invalid.yaml"))
    with page.expect_navigation():
        page.click("form.publish button")
    assert page.locator(".problems li").count() >= 2
    screenshot(page, "console-publish-refused")
    page.set_input_files(
        "input[name=file]", str(ROOT / "examples/definitions/purchase_order_v2.yaml")
    )
    page.click("form.publish button")
    page.wait_for_url(re.compile(r".*version=2.*"))
    page.goto(f"{demo.base}/definitions/purchase_order/diff?old=1&new=2")
    assert page.locator("table.diff tr.insert, table.diff tr.replace").count() > 0
    screenshot(page, "console-definition-diff")


def test_an_approver_decides_on_a_phone(demo: Demo, new_page: Any) -> None:
    phone = new_page(viewport=PHONE, is_mobile=True, has_touch=True)
    sign_in(phone, demo.base, user="mia", password=demo.password)
    phone.goto(f"{demo.base}/approvals")
    eventually(
        lambda: fresh(phone) and phone.locator("section.approval").count() == 2,
        "mia's inbox",
        30,
    )
    assert fits_width(phone)
    screenshot(phone, "console-approvals-phone")
    with phone.expect_navigation():
        phone.locator("section.approval", has_text="demo-po-1").locator("a").last.tap()
    assert fits_width(phone)
    button = phone.locator("button[value=approve]")
    box = button.bounding_box()
    assert box is not None and box["height"] >= 40
    screenshot(phone, "console-approval-phone")
    with phone.expect_navigation():
        button.tap()
    assert "The approval is approved" in phone.locator(".notice").inner_text()
    assert fits_width(phone)
