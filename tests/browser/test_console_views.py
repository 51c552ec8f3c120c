"""The console's pages as people read them, in a real headless Chromium at a desktop's and
a phone's width: tables whose words stay whole, the run page's actions menu, the
approvals page and its count in the navigation, times and durations, paging, the
favicon and the contrast of muted text.

The engine is served in-process on a real socket (SQLite); each test signs in with an
API key of its own. Screenshots go to the test's tmp_path (and build/screenshots/).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import waypost as wp
from tests.browser.conftest import DESKTOP, PHONE, fits_width, screenshot
from tests.helpers import eventually
from tests.integration.server_fixtures import make_keys, serve

__all__ = ["serve"]

pytestmark = pytest.mark.timeout(180)

TENANT = "acme"


@wp.activity
def reserve_budget(ctx: wp.ActivityContext, order: dict[str, Any]) -> dict[str, Any]:
    return {"reserved": order["amount"], "order": order["id"]}


SUPPLIER_DOWN = (
    "the supplier's catalogue service at catalogue.suppliers.example.com answered "
    "503 Service Unavailable for purchase_order_confirmation_request_v2 "
    "(retrying-in-a-moment-with-exponential-backoff-as-configured)"
)
calls: dict[str, int] = {}


@wp.activity(retry=wp.Retry(max_attempts=3, initial_interval=timedelta(milliseconds=50)))
def check_supplier(ctx: wp.ActivityContext, order: dict[str, Any]) -> str:
    calls[order["id"]] = calls.get(order["id"], 0) + 1
    if calls[order["id"]] == 1:  # a long error with long words, as real ones are
        raise ConnectionError(SUPPLIER_DOWN)
    return "in stock"


@wp.workflow(name="purchase_order")
async def purchase_order(ctx: wp.WorkflowContext, order: dict[str, Any]) -> dict[str, Any]:
    await ctx.run(check_supplier, order)
    for _ in range(5):  # events numbered past 9, as a real order's are
        await ctx.run(reserve_budget, order)
    decision = await ctx.approval("manager", approvers=wp.AnyOf(users=["mia"]), data=order)
    await ctx.wait_signal("goods_received")
    return {"order": order["id"], "approved": decision.outcome}


@pytest.fixture
def engine(sqlite_url: str) -> Iterator[wp.Engine]:
    eng = wp.Engine(sqlite_url, lease=2.0, poll_interval=0.05)
    eng.register(purchase_order, reserve_budget, check_supplier)
    with eng.running():
        yield eng
    eng.close()


@pytest.fixture
def site(engine: wp.Engine, serve: Any) -> dict[str, Any]:
    """The engine served on a real socket (the server stops before the engine closes),
    and API keys of an operator, a viewer and mia, an approver."""
    keys = make_keys(engine, "ops", "viewer", mia=(TENANT, "mia", "approver"))
    return {"engine": engine, "base": serve(engine), **keys}


def start_order(engine: wp.Engine, run_id: str, amount: int = 120) -> None:
    """Starts a purchase order and waits until it waits for the manager's approval."""
    order = {"id": run_id, "amount": amount, "note": "office chairs for the new team"}
    engine.start("purchase_order", order, tenant=TENANT, run_id=run_id)
    eventually(lambda: engine.get(run_id, tenant=TENANT).status.value == "waiting")


def sign_in(page: Any, base: str, key: str) -> None:
    page.goto(f"{base}/sign-in")
    form = page.locator("form", has=page.locator("input[name=key]"))
    form.locator("input[name=key]").fill(key)
    with page.expect_navigation():
        form.locator("button").click()


# Words of table cells a line break cuts in two (a word is a run of non-blank
# characters; a cut word's text spans two line boxes). Cells of long unbroken values
# (ids, details) may wrap anywhere and are not checked.
BROKEN_WORDS = """(selector) => {
    const cut = [];
    for (const cell of document.querySelectorAll(selector)) {
        if (cell.closest('td.id, td.detail') || cell.matches('table.history td:nth-child(8)')) continue;
        const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
        for (let node = walker.nextNode(); node; node = walker.nextNode()) {
            for (const m of node.data.matchAll(/\\S+/g)) {
                const range = document.createRange();
                range.setStart(node, m.index);
                range.setEnd(node, m.index + m[0].length);
                const tops = new Set([...range.getClientRects()].map(r => Math.round(r.top)));
                if (tops.size > 1) cut.push(m[0]);
            }
        }
    }
    return cut;
}"""


def broken_words(page: Any, selector: str = "th, td") -> list[str]:
    cut: list[str] = page.evaluate(BROKEN_WORDS, selector)
    return cut


def test_table_words_stay_whole_and_history_reads_on_a_phone(
    site: dict[str, Any], new_page: Any, tmp_path: Path
) -> None:
    engine = site["engine"]
    for n in range(3):
        start_order(engine, f"purchase-order-{n}")
    desktop = new_page(viewport=DESKTOP)
    sign_in(desktop, site["base"], site["ops"])
    assert broken_words(desktop) == []
    screenshot(desktop, "runs-desktop", folder=tmp_path)
    desktop.goto(f"{site['base']}/runs/purchase-order-0")
    assert desktop.locator("table.history tbody tr").count() >= 10
    assert broken_words(desktop) == []
    assert fits_width(desktop)
    screenshot(desktop, "run-desktop", folder=tmp_path)

    phone = new_page(viewport=PHONE, is_mobile=True, has_touch=True)
    sign_in(phone, site["base"], site["ops"])
    phone.goto(f"{site['base']}/runs/purchase-order-0")
    assert fits_width(phone)  # the page itself never scrolls sideways ...
    scroller = phone.locator(".table-scroll", has=phone.locator("table.history"))
    widths = scroller.evaluate("e => [e.scrollWidth, e.clientWidth]")
    assert widths[0] > widths[1]  # ... the history table does, in its own box
    assert broken_words(phone, "table.history th, table.history td") == []
    scroller.scroll_into_view_if_needed()
    screenshot(phone, "run-history-phone", folder=tmp_path, full_page=False)
    screenshot(phone, "run-phone", folder=tmp_path)


def menu(page: Any) -> list[str]:
    """The commands the run page's actions menu offers, in its order."""
    names: list[str] = page.locator("details.actions details[data-command]").evaluate_all(
        "all => all.map(d => d.dataset.command)"
    )
    return names


def test_the_actions_menu_offers_what_the_state_and_roles_allow_and_asks_first(
    site: dict[str, Any], new_page: Any, tmp_path: Path
) -> None:
    engine = site["engine"]
    start_order(engine, "po-menu")
    page = new_page(viewport=DESKTOP)
    sign_in(page, site["base"], site["ops"])
    page.goto(f"{site['base']}/runs/po-menu")
    # One closed menu: History is not pushed down by forms.
    assert page.locator("details.actions").count() == 1
    assert not page.locator("details.actions form").first.is_visible()
    # A run waiting at an approval: no Resume, Retry, Skip (no activity to skip) or
    # Update input (a run of code).
    assert menu(page) == ["cancel", "terminate", "pause", "fork", "signal"]
    page.click("details.actions > summary")
    page.click("details[data-command=terminate] > summary")
    form = page.locator("form[action$='/commands/terminate']")
    confirm = form.locator("label.confirm")
    assert confirm.inner_text().strip() == (
        "Terminate ends run po-menu now; its code does not run its cleanup."
    )
    form.locator("input[name=reason]").fill("ordered twice")
    screenshot(page, "run-actions-desktop", folder=tmp_path)
    form.locator("button").click()  # not confirmed: the browser does not send it
    assert page.locator(".notice").count() == 0
    assert engine.get("po-menu", tenant=TENANT).status.value == "waiting"
    form.locator("input[name=confirm]").check()
    with page.expect_navigation():
        form.locator("button").click()
    assert "Terminate: done." in page.locator(".notice").inner_text()
    assert menu(page) == ["fork"]  # a terminated run can only be forked

    # Paused, it is offered Resume, not Pause.
    start_order(engine, "po-paused")
    engine.pause("po-paused", reason="look first", tenant=TENANT)
    page.goto(f"{site['base']}/runs/po-paused")
    assert "resume" in menu(page) and "pause" not in menu(page)

    # A viewer has no menu at all; on a phone the open menu fits the screen.
    viewer = new_page(viewport=DESKTOP)
    sign_in(viewer, site["base"], site["viewer"])
    viewer.goto(f"{site['base']}/runs/po-paused")
    assert viewer.locator("details.actions").count() == 0
    phone = new_page(viewport=PHONE, is_mobile=True, has_touch=True)
    sign_in(phone, site["base"], site["ops"])
    phone.goto(f"{site['base']}/runs/po-paused")
    phone.tap("details.actions > summary")
    phone.tap("details[data-command=cancel] > summary")
    assert fits_width(phone)
    screenshot(phone, "run-actions-phone", folder=tmp_path, full_page=False)


def test_approvals_show_an_empty_state_the_decided_ones_and_a_count_in_the_nav(
    site: dict[str, Any], new_page: Any, tmp_path: Path
) -> None:
    engine = site["engine"]
    operator = new_page(viewport=DESKTOP)
    sign_in(operator, site["base"], site["ops"])
    operator.goto(f"{site['base']}/approvals")
    empty = operator.locator("#nothing-pending")
    assert "Nothing pending in acme" in empty.inner_text()
    assert "No approval has been decided yet." in operator.content()
    screenshot(operator, "approvals-empty", folder=tmp_path)

    start_order(engine, "po-a")
    start_order(engine, "po-b")
    mia = new_page(viewport=PHONE, is_mobile=True, has_touch=True)
    sign_in(mia, site["base"], site["mia"])
    count = mia.locator("header nav a[href='/approvals'] .count")
    assert count.inner_text() == "2"  # on every page, for the approvals mia may decide
    screenshot(mia, "nav-count-phone", folder=tmp_path, full_page=False)
    mia.goto(f"{site['base']}/approvals")
    mia.locator("section.approval", has_text="po-a").locator("a").last.tap()
    mia.fill("#comment", "fine by me")
    with mia.expect_navigation():
        mia.tap("button[value=approve]")
    assert count.inner_text() == "1"
    mia.goto(f"{site['base']}/approvals")
    mia.locator("section.approval", has_text="po-b").locator("a").last.tap()
    mia.fill("#comment", "not this quarter")
    with mia.expect_navigation():
        mia.tap("button[value=reject]")
    assert count.count() == 0  # nothing left to decide: no count
    assert fits_width(mia)
    screenshot(mia, "approval-decided-phone", folder=tmp_path, full_page=False)

    # The operator's page: nothing pending, and both decisions, the latest first.
    operator.goto(f"{site['base']}/approvals")
    assert operator.locator("#nothing-pending").count() == 1
    rows = operator.locator("table.decided tbody tr")
    assert rows.count() == 2
    latest, earlier = rows.nth(0).inner_text(), rows.nth(1).inner_text()
    assert "po-b" in latest and "rejected" in latest and "mia (rejected)" in latest
    assert "po-a" in earlier and "approved" in earlier and "mia (approved)" in earlier
    when = rows.nth(0).locator("time")
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", when.get_attribute("title") or "")
    screenshot(operator, "approvals-decided", folder=tmp_path)
    phone = new_page(viewport=PHONE, is_mobile=True, has_touch=True)
    sign_in(phone, site["base"], site["ops"])
    phone.goto(f"{site['base']}/approvals")
    assert fits_width(phone)
    screenshot(phone, "approvals-decided-phone", folder=tmp_path)


def test_runs_show_relative_times_end_and_duration(
    site: dict[str, Any], new_page: Any, tmp_path: Path
) -> None:
    engine = site["engine"]
    start_order(engine, "po-done")
    engine.terminate("po-done", reason="ordered twice", tenant=TENANT)
    start_order(engine, "po-open")
    page = new_page(viewport=DESKTOP)
    sign_in(page, site["base"], site["ops"])
    done = page.locator("table.runs tr", has=page.locator("a[href='/runs/po-done']"))
    created = done.locator("td[data-label=created] time")
    assert created.inner_text() == "just now"
    stamp = created.get_attribute("datetime") or ""
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", stamp)
    assert created.get_attribute("title") == stamp.replace("T", " ").replace("Z", " UTC")
    assert done.locator("td[data-label=finished] time").count() == 1
    assert re.fullmatch(r"[\d.]+ (ms|s)", done.locator("td[data-label=took]").inner_text())
    still = page.locator("table.runs tr", has=page.locator("a[href='/runs/po-open']"))
    assert still.locator("td[data-label=finished]").inner_text() == "—"
    screenshot(page, "runs-times-desktop", folder=tmp_path)
    page.goto(f"{site['base']}/runs/po-done")
    facts = page.locator("dl.facts").inner_text()
    assert "Finished\njust now" in facts and "Took\n" in facts
    screenshot(page, "run-times-desktop", folder=tmp_path, full_page=False)
    phone = new_page(viewport=PHONE, is_mobile=True, has_touch=True)
    sign_in(phone, site["base"], site["ops"])
    assert fits_width(phone)
    screenshot(phone, "runs-times-phone", folder=tmp_path)


# WCAG's contrast of two sRGB colours given as "rgb(r, g, b)".
def contrast(one: str, two: str) -> float:
    def luminance(colour: str) -> float:
        channels = [int(c) / 255 for c in re.findall(r"\d+", colour)[:3]]
        linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
        return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]

    light, dark = sorted((luminance(one), luminance(two)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_favicon_is_served_here_and_muted_text_reads(
    site: dict[str, Any], new_page: Any, tmp_path: Path, scheme: str
) -> None:
    start_order(site["engine"], f"po-{scheme}")
    page = new_page(viewport=DESKTOP, color_scheme=scheme)
    elsewhere: list[str] = []
    page.on(
        "request", lambda r: None if r.url.startswith(site["base"]) else elsewhere.append(r.url)
    )
    sign_in(page, site["base"], site["ops"])
    icon = page.locator("link[rel=icon]").get_attribute("href")
    assert icon == "/static/console/favicon.svg"
    answer = page.request.get(f"{site['base']}{icon}")
    assert answer.ok and answer.headers["content-type"].startswith("image/svg+xml")
    assert "<svg" in answer.text()
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    for selector in (".muted", "th", "header.top .who"):
        colour = page.locator(selector).first.evaluate("e => getComputedStyle(e).color")
        assert contrast(colour, background) >= 4.5, (selector, colour, background)
    assert elsewhere == []
    screenshot(page, f"runs-{scheme}", folder=tmp_path)


def test_pages_of_runs_say_where_they_are_and_go_back(
    site: dict[str, Any], new_page: Any, tmp_path: Path
) -> None:
    engine = site["engine"]
    for i in range(56):
        order = {"id": f"bulk-{i:02d}", "amount": i, "note": "bulk"}
        engine.start("purchase_order", order, tenant=TENANT, run_id=f"bulk-{i:02d}")
    page = new_page(viewport=DESKTOP)
    sign_in(page, site["base"], site["ops"])
    pager = page.locator("#runs nav.pager")
    assert pager.locator(".position").inner_text() == "1\u201350 of 56"
    with page.expect_navigation():
        pager.locator("a[rel=next]").click()
    assert pager.locator(".position").inner_text() == "51\u201356 of 56"
    assert pager.locator("a[rel=next]").count() == 0
    screenshot(page, "runs-page-2-desktop", folder=tmp_path)
    with page.expect_navigation():
        pager.locator("a[rel=prev]").click()
    assert pager.locator(".position").inner_text() == "1\u201350 of 56"
    phone = new_page(viewport=PHONE, is_mobile=True, has_touch=True)
    sign_in(phone, site["base"], site["ops"])
    with phone.expect_navigation():
        phone.locator("#runs nav.pager a[rel=next]").tap()
    assert fits_width(phone)
    phone.locator("#runs nav.pager").scroll_into_view_if_needed()
    screenshot(phone, "runs-page-2-phone", folder=tmp_path, full_page=False)
