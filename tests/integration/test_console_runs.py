"""The console's runs page, a run's page and the suspended runs page, over a real socket,
on both stores: filters, search, counts, paging, live refresh, what a run waits for and
what happens next, the timeline and attempts, replay, commands and hostile form input.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

import waypost as wp
from tests.helpers import eventually

from .console_fixtures import Browser
from .server_fixtures import make_keys, serve

__all__ = ["serve"]

pytestmark = pytest.mark.timeout(180)

attempts: dict[str, int] = {}


@wp.workflow(name="waits_runs", version="1")
async def waits(ctx: wp.WorkflowContext, n: int) -> int:
    extra = await ctx.wait_signal("go", correlate=("order", f"o-{n}"))
    return n + int(extra or 0)


@wp.workflow(name="waits_runs", version="2")
async def waits_v2(ctx: wp.WorkflowContext, n: int) -> int:
    await ctx.wait_signal("go")
    return -n


@wp.activity(retry=wp.Retry(max_attempts=3, initial_interval=timedelta(milliseconds=50)))
def flaky_console(ctx: wp.ActivityContext, key: str) -> str:
    attempts[key] = attempts.get(key, 0) + 1
    if attempts[key] == 1:
        raise ConnectionError("the first call fails")
    return f"ok {key}"


@wp.workflow(name="steps_runs")
async def steps(ctx: wp.WorkflowContext, key: str) -> str:
    result: str = await ctx.run(flaky_console, key)
    await ctx.wait_signal("finish")
    return result


@wp.workflow(name="buggy_runs")
async def buggy(ctx: wp.WorkflowContext) -> None:
    raise KeyError("a bug in the workflow code")


@wp.activity
def tick_console(ctx: wp.ActivityContext, i: int) -> int:
    return i


@wp.workflow(name="long_runs")
async def long_run(ctx: wp.WorkflowContext, steps: int) -> int:
    for i in range(steps):
        await ctx.run(tick_console, i)
    await ctx.wait_signal("finish")
    return steps


@pytest.fixture
def site(make_engine: Any, serve: Any) -> Iterator[dict[str, Any]]:
    attempts.clear()
    engine = make_engine(waits, waits_v2, steps, flaky_console, buggy, long_run, tick_console)
    with engine.running():
        base = serve(engine)
        keys = make_keys(engine, "ops", "viewer")
        yield {"engine": engine, "base": base, **keys}


def signed_in(site: dict[str, Any], key: str = "ops") -> Browser:
    b = Browser(site["base"])
    assert b.sign_in_key(site[key]).status_code == 303
    return b


def run_links(html: str) -> list[str]:
    return re.findall(r'<a href="/runs/([^"/?]+)">', html)


def waiting_run(engine: Any, amount: int, run_id: str, version: str) -> None:
    """Starts run `run_id` of `waits_runs` (its `version`) in tenant acme, and waits
    until it waits."""
    engine.start("waits_runs", amount, tenant="acme", run_id=run_id, version=version)
    eventually(lambda: engine.get(run_id, tenant="acme").status.value == "waiting")


def test_filters_counts_and_search(site: dict[str, Any]) -> None:
    engine = site["engine"]
    for n in range(3):
        engine.start("waits_runs", n, tenant="acme", run_id=f"v1-{n}", version="1")
    engine.start("waits_runs", 9, tenant="acme", run_id="v2-9", version="2")
    engine.start(buggy, tenant="acme", run_id="bug-1")
    eventually(lambda: engine.get("bug-1", tenant="acme").status.value == "suspended")
    eventually(lambda: engine.get("v2-9", tenant="acme").status.value == "waiting")
    b = signed_in(site)

    everything = b.get("/runs")
    assert set(run_links(everything.text)) == {"v1-0", "v1-1", "v1-2", "v2-9", "bug-1"}
    assert re.search(r"waiting <strong>4</strong>", everything.text)
    assert re.search(r"suspended <strong>1</strong>", everything.text)

    assert run_links(b.get("/runs?status=suspended").text) == ["bug-1"]
    by_version = b.get("/runs?workflow=waits_runs&version=2").text
    assert run_links(by_version) == ["v2-9"]
    assert len(run_links(b.get("/runs?workflow=waits_runs&version=1").text)) == 3
    assert run_links(b.get("/runs?status=waiting&workflow=buggy_runs").text) == []

    assert run_links(b.get("/runs?q=v1-1").text) == ["v1-1"]  # a run id
    assert set(run_links(b.get("/runs?q=v1-").text)) == {"v1-0", "v1-1", "v1-2"}  # its start
    eventually(lambda: run_links(b.get("/runs?q=o-2").text) == ["v1-2"])  # correlation value
    assert run_links(b.get("/runs?q=order%3Do-1").text) == ["v1-1"]  # key=value
    assert run_links(b.get("/runs?q=nothing-like-it").text) == []

    fragment = b.get("/runs/fragment?status=suspended")
    assert fragment.status_code == 200
    assert "<html" not in fragment.text
    assert run_links(fragment.text) == ["bug-1"]
    assert Browser(site["base"]).get("/runs/fragment").status_code == 401  # signed out
    page = b.get("/runs?status=suspended").text
    assert 'data-refresh="/runs/fragment?status=suspended" data-every="5"' in page


def test_keyset_pages_cover_every_run_once(site: dict[str, Any]) -> None:
    engine = site["engine"]
    made = {f"p-{i:03d}" for i in range(120)}
    for run_id in sorted(made):
        engine.start("waits_runs", 1, tenant="acme", run_id=run_id, version="2")
    b = signed_in(site)
    seen: list[str] = []
    path: str | None = "/runs?workflow=waits_runs"
    pages = 0
    while path is not None:
        page = b.get(path.replace("&amp;", "&"))
        assert page.status_code == 200
        seen += run_links(page.text)
        found = re.search(r'<a href="([^"]+)" rel="next">', page.text)
        path = found.group(1) if found else None
        pages += 1
        if pages == 2:  # a run started while paging does not shift later pages
            engine.start("waits_runs", 1, tenant="acme", run_id="p-late", version="2")
    assert pages == 3
    assert len(seen) == len(set(seen)) == 120
    assert set(seen) == made


def test_a_run_page_says_what_it_waits_for_and_what_happens_next(site: dict[str, Any]) -> None:
    engine = site["engine"]
    engine.start(steps, "k1", tenant="acme", run_id="s-1")
    eventually(lambda: engine.get("s-1", tenant="acme").status.value == "waiting")
    info = engine.get("s-1", tenant="acme")
    b = signed_in(site, "viewer")
    page = b.get("/runs/s-1")
    assert page.status_code == 200
    text = page.text
    assert "Waiting for</dt><dd>signal finish" in text
    assert info.next_action is not None
    assert str(info.next_action["detail"]) in text.replace("&#39;", "'")
    # the steps so far, coloured by state, and the attempts with their errors
    assert 'class="state-completed"><strong>' in text
    assert "ConnectionError: the first call fails" in text
    assert text.count("flaky_console") >= 2
    # the timeline: time, actor, attempt, duration
    assert "ActivityFailed" in text and "ActivityCompleted" in text
    assert "<th>Actor</th>" in text and "<th>Took</th>" in text


def test_replay_steps_through_the_history(site: dict[str, Any]) -> None:
    engine = site["engine"]
    engine.start(steps, "k2", tenant="acme", run_id="s-2")
    eventually(lambda: engine.get("s-2", tenant="acme").status.value == "waiting")
    events = engine.history("s-2", tenant="acme")
    completed = next(e.seq for e in events if e.type == "ActivityCompleted")
    b = signed_in(site, "viewer")
    first = b.get("/runs/s-2?at=1").text
    assert "Replay: after event 1 (RunStarted)" in first
    assert "&#34;k2&#34;" in first  # the input
    assert "ok k2" not in first
    assert 'href="?at=2#replay" rel="next"' in first
    assert 'rel="prev"' not in first
    after = b.get(f"/runs/s-2?at={completed}").text
    assert "ok k2" in after  # the result known after that event
    assert f'href="?at={completed - 1}#replay" rel="prev"' in after
    last = b.get("/runs/s-2?at=999999").text
    assert f"Replay: after event {events[-1].seq} " in last
    assert 'rel="next"' not in last.split('id="replay"')[1].split("</nav>")[0]
    for junk in ("abc", "-1", "1e9", "\uff11", "%FF"):  # \uff11: a full-width digit one
        assert b.get(f"/runs/s-2?at={junk}").status_code == 200


def test_commands_show_their_outcome_refusals_included(site: dict[str, Any]) -> None:
    engine = site["engine"]
    waiting_run(engine, 5, "c-1", "1")
    b = signed_in(site)
    token = b.csrf("/runs/c-1")

    refused = b.post("/runs/c-1/commands/resume", data={"csrf": token, "reason": "why not"})
    assert refused.status_code == 409
    assert "Resume: not done." in refused.text

    paused = b.post("/runs/c-1/commands/pause", data={"csrf": token, "reason": "look first"})
    assert paused.status_code == 200
    assert "Pause: done." in paused.text
    assert engine.get("c-1", tenant="acme").status.value == "paused"
    resumed = b.post("/runs/c-1/commands/resume", data={"csrf": token, "reason": "looked"})
    assert "Resume: done." in resumed.text

    sent = b.post(
        "/runs/c-1/commands/signal", data={"csrf": token, "signal": "go", "payload": "10"}
    )
    assert "Send a signal: done." in sent.text
    assert engine.result("c-1", timeout=10, tenant="acme") == 15


def test_the_suspended_page_shows_the_error_its_place_and_the_repairs(
    site: dict[str, Any],
) -> None:
    engine = site["engine"]
    engine.start(buggy, tenant="acme", run_id="bug-2")
    eventually(lambda: engine.get("bug-2", tenant="acme").status.value == "suspended")
    ops_page = signed_in(site).get("/suspended")
    assert ops_page.status_code == 200
    assert "bug-2" in ops_page.text
    assert "KeyError" in ops_page.text
    assert "test_console_runs.py" in ops_page.text  # where in the code
    for action in ("resume", "retry", "terminate"):
        assert f"/runs/bug-2/commands/{action}" in ops_page.text
    viewer_page = signed_in(site, "viewer").get("/suspended")
    assert "bug-2" in viewer_page.text
    assert "/commands/" not in viewer_page.text
    b = signed_in(site)
    done = b.post(
        "/runs/bug-2/commands/terminate", data={"csrf": b.csrf("/suspended"), "reason": "bug"}
    )
    assert "Terminate: done." in done.text
    assert "bug-2" not in b.get("/suspended").text


HOSTILE = [
    ("", 422),  # a reason is required
    ("   ", 422),
    ("x" * 100_000, 422),
    ("nul \x00 byte", 422),
    ("bell \x07", 422),
]


@pytest.mark.parametrize(("reason", "status"), HOSTILE)
def test_hostile_reasons_are_refused_and_nothing_is_done(
    site: dict[str, Any], reason: str, status: int
) -> None:
    engine = site["engine"]
    waiting_run(engine, 1, "h-1", "2")
    before = len(engine.history("h-1", tenant="acme"))
    b = signed_in(site)
    answer = b.post(
        "/runs/h-1/commands/terminate", data={"csrf": b.csrf("/runs/h-1"), "reason": reason}
    )
    assert answer.status_code == status
    assert "Terminate: not done." in answer.text
    assert len(engine.history("h-1", tenant="acme")) == before


@pytest.mark.parametrize(
    ("path", "fields", "status"),
    [
        ("/runs/h-2/commands/signal", {"signal": "go", "payload": "{not json"}, 422),
        ("/runs/h-2/commands/signal", {"signal": "go", "payload": "[" * 100_000}, 422),
        ("/runs/h-2/commands/signal", {"signal": "", "payload": ""}, 422),
        ("/runs/h-2/commands/signal", {"signal": "g\x1bo", "payload": ""}, 422),
        ("/runs/h-2/commands/update-input", {"reason": "r", "data": "[1]"}, 422),
        ("/runs/h-2/commands/skip", {"reason": "r", "step": "", "output": ""}, 422),
        ("/runs/h-2/commands/explode", {"reason": "r"}, 404),
        ("/runs/no-such-run/commands/terminate", {"reason": "r"}, 404),
        ("/runs/" + "x" * 300 + "/commands/terminate", {"reason": "r"}, 422),
    ],
)
def test_hostile_command_fields_are_refused_and_nothing_is_done(
    site: dict[str, Any], path: str, fields: dict[str, str], status: int
) -> None:
    engine = site["engine"]
    waiting_run(engine, 1, "h-2", "2")
    before = len(engine.history("h-2", tenant="acme"))
    b = signed_in(site)
    answer = b.post(path, data={"csrf": b.csrf("/runs"), **fields})
    assert answer.status_code == status, answer.text[:3000]
    assert len(engine.history("h-2", tenant="acme")) == before


def test_bytes_that_are_not_utf8_in_a_command_form_do_nothing(site: dict[str, Any]) -> None:
    engine = site["engine"]
    waiting_run(engine, 1, "h-3", "2")
    b = signed_in(site)
    token = b.csrf("/runs")
    body = b"csrf=" + token.encode() + b"&reason=%FF%FE" + b"\xff\xfe" * 10
    answer = b.post(
        "/runs/h-3/commands/terminate",
        content=body,
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert answer.status_code in (400, 422)
    assert engine.get("h-3", tenant="acme").status.value == "waiting"


@pytest.mark.parametrize(
    "query",
    [
        "status=bogus",
        "cursor=garbage",
        "version=1",  # without its workflow
        "workflow=" + "w" * 500,
        "q=" + "q" * 500,
        "q=a%00b",
        "q=%FF%FE",
        "workflow=a%0Ab",
    ],
)
def test_hostile_filters_get_a_located_message(site: dict[str, Any], query: str) -> None:
    b = signed_in(site, "viewer")
    answer = b.get(f"/runs?{query}")
    assert answer.status_code == 422, answer.text[:2000]
    assert 'class="notice bad"' in answer.text


DELIVERY = """
name: delivery_console
input:
  type: object
  required: [order_id]
  properties:
    order_id: {type: string}
start: goods
steps:
  goods:
    type: wait
    signal: goods_received
    output: $.delivery
    next: done
  done:
    type: succeed
    output: "{order: order_id, note: delivery.note}"
"""


def test_replay_of_a_definition_run_shows_its_data_after_each_event(
    site: dict[str, Any],
) -> None:
    engine = site["engine"]
    engine.publish(DELIVERY, tenant="acme")
    engine.start("delivery_console", {"order_id": "PO-7"}, tenant="acme", run_id="d-1")
    eventually(lambda: engine.get("d-1", tenant="acme").status.value == "waiting")
    engine.signal("d-1", "goods_received", {"note": "all there"}, tenant="acme")
    assert engine.result("d-1", timeout=10, tenant="acme") == {"order": "PO-7", "note": "all there"}
    events = engine.history("d-1", tenant="acme")
    received = next(e.seq for e in events if e.type == "SignalReceived")
    b = signed_in(site, "viewer")
    before = b.get(f"/runs/d-1?at={received - 1}").text
    assert "PO-7" in before
    assert "&#34;definition&#34;" in before
    assert "all there" not in before.split('id="replay"')[1].split("<h2>History")[0]
    after = b.get(f"/runs/d-1?at={events[-1].seq}").text
    replayed = after.split('id="replay"')[1].split("<h2>History")[0]
    assert "&#34;delivery&#34;: {" in replayed
    assert "all there" in replayed
    assert engine.data_at("d-1", 1, tenant="acme") is not None


def test_a_finished_run_offers_a_fork_and_not_a_terminate(site: dict[str, Any]) -> None:
    engine = site["engine"]
    engine.start(steps, "k3", tenant="acme", run_id="f-1")
    eventually(lambda: engine.get("f-1", tenant="acme").status.value == "waiting")
    engine.signal("f-1", "finish", tenant="acme")
    assert engine.result("f-1", timeout=10, tenant="acme") == "ok k3"
    b = signed_in(site)
    page = b.get("/runs/f-1").text
    assert "/runs/f-1/commands/fork" in page
    assert "/runs/f-1/commands/terminate" not in page
    forked = b.post(
        "/runs/f-1/commands/fork", data={"csrf": b.csrf("/runs/f-1"), "reason": "again", "step": ""}
    )
    assert forked.status_code == 200, forked.text[:2000]
    new = re.search(r"Fork: done\. The new run is ([^ <]+)\.", forked.text)
    assert new is not None
    assert engine.get(new.group(1), tenant="acme").workflow == "steps_runs"


def test_a_long_history_is_shown_a_window_at_a_time(site: dict[str, Any]) -> None:
    engine = site["engine"]
    run = engine.start(long_run, 700, tenant="acme", run_id="long-1")
    eventually(lambda: engine.get("long-1", tenant="acme").status.value == "waiting", timeout=60)
    last = engine.get("long-1", tenant="acme").last_seq
    assert last > 1400
    b = signed_in(site)

    def seqs(html: str) -> list[int]:
        return [int(n) for n in re.findall(r'<tr><td><a href="\?at=(\d+)#replay">', html)]

    newest = b.get(f"/runs/{run.run_id}").text
    shown = seqs(newest)
    # The run's first event, then the newest 500: never the whole history.
    assert shown[0] == 1 and shown[1] == last - 499 and shown[-1] == last
    assert len(shown) == 501
    assert f"Events {last - 499} to {last} of {last}" in newest
    assert f"events 2 to {last - 500} not shown" in newest
    assert f'href="?after={last - 1000}#history" rel="prev">Older events' in newest

    oldest = b.get(f"/runs/{run.run_id}?after=0").text
    assert seqs(oldest) == list(range(1, 501))
    assert 'href="?after=500#history" rel="next">Newer events' in oldest

    # The replay view of an old event reads the window around it.
    replayed = b.get(f"/runs/{run.run_id}?at=300").text
    assert "Replay: after event 300" in replayed
    assert 300 in seqs(replayed) and last not in seqs(replayed)
    engine.signal("long-1", "finish", None, tenant="acme")
    assert engine.result("long-1", tenant="acme", timeout=30) == 700


def test_a_run_page_offers_only_the_commands_its_state_allows(site: dict[str, Any]) -> None:
    engine = site["engine"]
    waiting_run(engine, 2, "m-1", "1")
    b = signed_in(site)

    def offered(run_id: str) -> set[str]:
        return set(
            re.findall(
                rf'action="/runs/{run_id}/commands/([a-z-]+)"', b.get(f"/runs/{run_id}").text
            )
        )

    assert offered("m-1") == {"cancel", "terminate", "pause", "fork", "signal"}
    assert 'name="confirm" value="yes" required' in b.get("/runs/m-1").text
    engine.pause("m-1", reason="look first", tenant="acme")
    assert offered("m-1") == {"cancel", "terminate", "resume", "fork", "signal"}
    # The door still refuses what the page no longer offers, with its message.
    token = b.csrf("/runs/m-1")
    refused = b.post("/runs/m-1/commands/pause", data={"csrf": token, "reason": "again"})
    assert refused.status_code == 409 and "Pause: not done." in refused.text
    assert "/commands/" not in signed_in(site, "viewer").get("/runs/m-1").text


def test_pages_of_runs_go_back_and_say_where_they_are(site: dict[str, Any]) -> None:
    engine = site["engine"]
    for i in range(60):
        engine.start("waits_runs", 1, tenant="acme", run_id=f"q-{i:03d}", version="2")
    b = signed_in(site)

    def follow(html: str, rel: str) -> str | None:
        found = re.search(rf'<a href="([^"]+)" rel="{rel}">', html)
        return found.group(1).replace("&amp;", "&") if found else None

    first = b.get("/runs").text
    assert "1\u201350 of 60" in first
    assert follow(first, "prev") is None
    second_path = follow(first, "next")
    assert second_path is not None
    second = b.get(second_path).text
    assert "51\u201360 of 60" in second
    assert follow(second, "next") is None
    back = follow(second, "prev")
    assert back is not None
    assert run_links(b.get(back).text) == run_links(first)
    # A workflow filter has no cheap total: the position alone.
    filtered = b.get("/runs?workflow=waits_runs").text
    assert "1\u201350</span>" in filtered
    filtered_next = b.get(follow(filtered, "next") or "").text
    assert "51\u201360</span>" in filtered_next
    # A made-up way back or position only draws no Previous link or position; nothing
    # else changes (the runs listed are the second page's).
    for hostile in (
        "back=junk",
        "back=" + ",".join(["1:x"] * 5000),
        "back=%00:%01",
        "back=1:" + "a" * 5000,
        "offset=%C3%A9",
        "offset=-5",
        "offset=" + "9" * 50,
        "offset=1%0A2",
    ):
        answer = b.get(f"{second_path}&{hostile}")
        assert answer.status_code == 200, (hostile, answer.status_code)
        assert run_links(answer.text) == run_links(second), hostile
    # An address that is not UTF-8 is refused as such, as every console address is.
    refused = b.get(f"{second_path}&back=%FF%FE:%00")
    assert refused.status_code == 422
    assert "not UTF-8 text" in refused.text
