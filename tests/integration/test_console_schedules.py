"""The console's schedules pages over a real socket, on both stores: the list with each
schedule's timing, next and last fire (linking its run), a schedule's page with its
recent runs, and pause / resume / delete as CSRF-checked forms through the door,
shown by role."""

from __future__ import annotations

import html
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

import pytest

import waypost as wp
from tests.helpers import eventually
from waypost.model.schedules import fire_run_id
from waypost.testing import TestClock

from .console_fixtures import Browser
from .server_fixtures import make_keys, serve

__all__ = ["serve"]

pytestmark = pytest.mark.timeout(120)


@wp.workflow(name="console_tick")
async def tick(ctx: wp.WorkflowContext, label: str) -> str:
    return label


def at(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


@pytest.fixture
def site(make_engine: Any, serve: Any) -> Iterator[dict[str, Any]]:
    clock = TestClock(start=at("2026-06-01T09:59:00"))
    engine = make_engine(tick, clock=clock)
    engine.schedule(tick, id="hourly", every=timedelta(hours=1), input="h", tenant="acme")
    # an id that starts with the other's and a colon: its runs are not the other's
    engine.schedule(
        tick, id="hourly:eu", cron="30 9 * * *", tz="Europe/Madrid", input="e", tenant="acme"
    )
    with engine.running():
        base = serve(engine)
        keys = make_keys(engine, "ops", "viewer", "other")
        clock.jump(at("2026-06-01T10:00:01") - clock())
        fired = fire_run_id("hourly", at("2026-06-01T10:00:00"))
        eventually(
            lambda: engine.describe_schedule("hourly", tenant="acme").last_run_id == fired,
            "the 10:00 fire",
        )
        yield {"engine": engine, "base": base, "fired": fired, **keys}


def link(run_id: str) -> str:
    return f'href="/runs/{quote(run_id, safe="")}"'


def signed_in(site: dict[str, Any], key: str) -> Browser:
    b = Browser(site["base"])
    answer = b.sign_in_key(site[key])
    assert answer.status_code == 303, answer.text[:500]
    return b


def test_the_list_shows_timing_fires_and_state(site: dict[str, Any]) -> None:
    b = signed_in(site, "viewer")
    assert 'href="/schedules"' in b.get("/runs").text  # in the nav
    listed = b.get("/schedules")
    assert listed.status_code == 200
    text = html.unescape(listed.text)
    assert 'href="/schedules/hourly"' in text and "every 60 min" in text
    assert "<code>30 9 * * *</code> (Europe/Madrid)" in text
    assert "2026-06-01 11:00:00 UTC" in text  # the next fire
    assert "2026-06-01 10:00:00 UTC" in text  # the last one, linking its run
    assert link(site["fired"]) in text
    assert "skip" in text and "active" in text


def test_a_schedules_page_lists_its_runs_only(site: dict[str, Any]) -> None:
    engine = site["engine"]
    engine.backfill_schedule(
        "hourly", "2026-05-31T00:00:00Z", "2026-05-31T01:00:00Z", tenant="acme"
    )
    engine.backfill_schedule(
        "hourly:eu", "2026-05-31T00:00:00Z", "2026-05-31T23:00:00Z", tenant="acme"
    )
    b = signed_in(site, "viewer")
    shown = html.unescape(b.get("/schedules/hourly").text)
    mine = [
        site["fired"],
        fire_run_id("hourly", at("2026-05-31T00:00:00")),
        fire_run_id("hourly", at("2026-05-31T01:00:00")),
    ]
    for run_id in mine:
        assert link(run_id) in shown
    assert "sched:hourly:eu:" not in shown and "hourly%3Aeu%3A" not in shown
    assert "Recent runs" in shown
    # a reader sees no command
    assert "/commands/" not in shown
    eu = html.unescape(b.get("/schedules/hourly%3Aeu").text)
    assert link(fire_run_id("hourly:eu", at("2026-05-31T07:30:00"))) in eu
    assert link(site["fired"]) not in eu


def test_pause_resume_delete_by_form_through_the_door(site: dict[str, Any]) -> None:
    engine = site["engine"]
    b = signed_in(site, "ops")
    shown = b.get("/schedules/hourly").text
    assert "/schedules/hourly/commands/pause" in shown
    assert "/schedules/hourly/commands/resume" not in shown  # not paused
    # without the session's CSRF token: refused, nothing done
    forged = b.http.post("/schedules/hourly/commands/pause", data={"csrf": "nope"})
    assert forged.status_code == 403
    assert not engine.describe_schedule("hourly", tenant="acme").paused
    paused = b.post_form("/schedules/hourly/commands/pause", {}, page="/schedules/hourly")
    assert paused.status_code == 200 and "Pause: done." in paused.text
    assert engine.describe_schedule("hourly", tenant="acme").paused
    assert "/schedules/hourly/commands/resume" in paused.text
    resumed = b.post_form("/schedules/hourly/commands/resume", {}, page="/schedules/hourly")
    assert "Resume: done." in resumed.text
    assert not engine.describe_schedule("hourly", tenant="acme").paused
    unknown = b.post_form("/schedules/hourly/commands/explode", {}, page="/schedules/hourly")
    assert unknown.status_code == 404
    gone = b.post_form("/schedules/hourly/commands/delete", {}, page="/schedules/hourly")
    assert gone.status_code == 303 and gone.headers["location"] == "/schedules"
    assert [s.schedule_id for s in engine.schedules(tenant="acme")] == ["hourly:eu"]
    again = b.post_form("/schedules/hourly/commands/pause", {}, page="/schedules")
    assert again.status_code == 404 and "no schedule" in again.text


def test_roles_and_tenants_are_the_doors(site: dict[str, Any]) -> None:
    engine = site["engine"]
    viewer = signed_in(site, "viewer")
    refused = viewer.post_form("/schedules/hourly/commands/pause", {}, page="/schedules/hourly")
    assert refused.status_code == 403 and "Pause: not done." in refused.text
    assert not engine.describe_schedule("hourly", tenant="acme").paused
    other = signed_in(site, "other")
    assert other.get("/schedules/hourly").status_code == 404
    assert "hourly" not in other.get("/schedules").text
    stranger = other.post_form("/schedules/hourly/commands/pause", {}, page="/schedules")
    assert stranger.status_code == 404
    assert not engine.describe_schedule("hourly", tenant="acme").paused
    # signed out: sent to sign in
    anonymous = Browser(site["base"])
    answer = anonymous.http.get("/schedules")
    assert answer.status_code == 303 and answer.headers["location"].startswith("/sign-in")


def test_ids_with_slashes_have_their_pages(site: dict[str, Any]) -> None:
    engine = site["engine"]
    engine.schedule(tick, id="eu/daily", every=timedelta(hours=1), input="x", tenant="acme")
    engine.start(tick, "r", run_id="orders/1", tenant="acme")
    b = signed_in(site, "ops")
    assert 'href="/schedules/eu%2Fdaily"' in b.get("/schedules").text
    shown = b.get("/schedules/eu%2Fdaily")
    assert shown.status_code == 200 and "Schedule eu/daily" in shown.text
    paused = b.post_form("/schedules/eu%2Fdaily/commands/pause", {}, page="/schedules")
    assert "Pause: done." in paused.text
    assert engine.describe_schedule("eu/daily", tenant="acme").paused
    assert not engine.describe_schedule("hourly", tenant="acme").paused
    run_page = b.get("/runs/orders%2F1")
    assert run_page.status_code == 200 and "orders/1" in run_page.text
    assert 'action="/runs/orders%2F1/commands/' in run_page.text
