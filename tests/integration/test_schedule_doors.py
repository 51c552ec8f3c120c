"""Schedules through every door, on both stores: the CLI (a real subprocess), the HTTP
API (a real server) and the remote client; roles, tenants and bad input."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

import waypost as wp
from tests.helpers import eventually
from tests.helpers.cli import waypost_on

from .server_fixtures import Api, make_key, serve

__all__ = ["serve"]  # the fixture, used by name

pytestmark = pytest.mark.timeout(180)

NIGHTLY = """
name: nightly
start: done
steps:
  done: {type: succeed}
"""


def cli(db_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return waypost_on(db_url, "schedules", *args)


def test_cli_create_list_show_pause_resume_backfill_delete(make_engine: Any, db_url: str) -> None:
    engine = make_engine()
    engine.publish(NIGHTLY)
    made = cli(
        db_url,
        "create",
        "nightly-1",
        "nightly",
        "--cron",
        "0 2 * * *",
        "--tz",
        "Europe/Madrid",
        "--input",
        '{"k": 1}',
        "--json",
    )
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout)["tz"] == "Europe/Madrid"
    listed = cli(db_url, "list", "--json")
    assert [s["schedule_id"] for s in json.loads(listed.stdout)] == ["nightly-1"]
    shown = json.loads(cli(db_url, "show", "nightly-1").stdout)
    assert shown["input"] == {"k": 1} and shown["cron"] == "0 2 * * *"
    assert "paused" in cli(db_url, "pause", "nightly-1").stdout
    assert engine.describe_schedule("nightly-1").paused
    assert cli(db_url, "resume", "nightly-1").returncode == 0
    assert not engine.describe_schedule("nightly-1").paused
    filled = cli(
        db_url,
        "backfill",
        "nightly-1",
        "--start",
        "2026-01-01T00:00Z",
        "--end",
        "2026-01-03T00:00Z",
    )
    assert filled.returncode == 0, filled.stderr
    fires = json.loads(filled.stdout)["fires"]
    assert [f["fire_at"] for f in fires] == ["2026-01-01T01:00:00Z", "2026-01-02T01:00:00Z"]
    assert all(engine.get(f["run_id"]) for f in fires)
    # bad input: a located error, nothing written
    bad = cli(db_url, "create", "bad", "nightly", "--cron", "0 25 * * *")
    assert bad.returncode != 0 and "cron" in bad.stderr
    bad = cli(db_url, "create", "bad", "nightly", "--cron", "0 2 * * *", "--tz", "Nowhere/City")
    assert bad.returncode != 0 and "time zone" in bad.stderr
    bad = cli(db_url, "create", "bad", "no-such-workflow", "--every", "60")
    assert bad.returncode != 0 and "no-such-workflow" in bad.stderr
    missing = cli(db_url, "show", "nightly-1", "--tenant", "other")
    assert missing.returncode != 0 and "no schedule" in missing.stderr
    assert cli(db_url, "delete", "nightly-1").returncode == 0
    assert engine.schedules() == []


def test_http_and_remote_client(make_engine: Any, serve: Any) -> None:
    engine = make_engine(poll_interval=0.05)
    engine.publish(NIGHTLY, tenant="acme")
    engine.publish(NIGHTLY, tenant="other")
    base = serve(engine)
    operator = make_key(engine, "acme", "olga", "operator")
    viewer = make_key(engine, "acme", "vic", "viewer")
    stranger = make_key(engine, "other", "sam", "admin")
    with Api(base, operator) as api, Api(base, viewer) as reader, Api(base, stranger) as other:
        body = {"id": "hourly", "workflow": "nightly", "every": 3600, "input": {"a": 1}}
        made = api.post("/v1/schedules", json=body)
        assert made.status_code == 201, made.text
        assert made.json()["next_fire_at"] is not None and made.json()["next_fire"].endswith("Z")
        assert api.post("/v1/schedules", json=body).status_code == 409
        listed = reader.get("/v1/schedules")
        assert [s["schedule_id"] for s in listed.json()["schedules"]] == ["hourly"]
        assert reader.post("/v1/schedules/hourly/pause").status_code == 403
        assert reader.delete("/v1/schedules/hourly").status_code == 403
        # another tenant's schedule is not found, whatever the roles
        assert other.get("/v1/schedules/hourly").status_code == 404
        assert other.post("/v1/schedules/hourly/pause").status_code == 404
        assert other.delete("/v1/schedules/hourly").status_code == 404
        assert other.get("/v1/schedules").json()["schedules"] == []
        assert api.post("/v1/schedules/hourly/pause").json()["paused"] is True
        assert api.post("/v1/schedules/hourly/resume").json()["paused"] is False
        filled = api.post(
            "/v1/schedules/hourly/backfill",
            json={"start": "2026-01-01T00:00:00Z", "end": "2026-01-01T02:00:00Z"},
        )
        assert filled.status_code == 200, filled.text
        assert len(filled.json()["fires"]) == 3
        for bad, field in [
            ({**body, "id": "b1", "every": None, "cron": "0 9 * * *", "tz": "Mars/Base"}, "tz"),
            ({**body, "id": "b2", "every": None, "cron": "every day"}, "cron"),
            ({**body, "id": "b3", "overlap": "often"}, "overlap"),
            ({**body, "id": "b4\u202e"}, "schedule_id"),
        ]:
            refused = api.post("/v1/schedules", json=bad)
            assert refused.status_code == 422, (bad, refused.text)
            assert refused.json()["error"]["details"].get("field") == field, refused.text
        unknown = api.post("/v1/schedules", json={**body, "id": "b5", "workflow": "nope"})
        assert unknown.status_code in (404, 422) and "nope" in unknown.text
        assert [s["schedule_id"] for s in reader.get("/v1/schedules").json()["schedules"]] == [
            "hourly"
        ]
        assert api.delete("/v1/schedules/hourly").status_code == 200
        assert api.get("/v1/schedules/hourly").status_code == 404

    with wp.Client(base, operator) as client:
        info = client.schedule("nightly", id="remote", cron="30 6 * * *", tz="Europe/Madrid")
        assert info.tz == "Europe/Madrid"
        assert [s.schedule_id for s in client.schedules()] == ["remote"]
        assert client.pause_schedule("remote").paused
        assert not client.resume_schedule("remote").paused
        done = client.backfill_schedule("remote", "2026-07-01T00:00:00Z", "2026-07-01T23:00:00Z")
        assert done.fires == [("2026-07-01T04:30:00Z", "sched:remote:2026-07-01T04:30:00Z")]
        eventually(lambda: engine.get("sched:remote:2026-07-01T04:30:00Z", tenant="acme"))
        client.delete_schedule("remote")
        with pytest.raises(wp.errors.ScheduleNotFound):
            client.describe_schedule("remote")
