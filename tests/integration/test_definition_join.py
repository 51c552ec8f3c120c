"""Parallel branches merge by the paths they wrote; published versions keep running.

Both stores. Branches that store different fields of one object keep all of them
at the join; a version published under a tenant's raised limits still runs.
"""

from __future__ import annotations

from typing import Any

import pytest

import waypost as wp
from tests.helpers import of_type

pytestmark = pytest.mark.timeout(120)


@wp.activity(name="join.echo")
def echo(ctx: wp.ActivityContext, value: Any = None) -> Any:
    return value


NESTED_WRITES = """
name: nested_join
start: both
steps:
  both:
    type: parallel
    branches:
      - start: pay
        steps:
          pay: {type: activity, activity: join.echo, input: {value: "'paid'"}, output: $.order.payment}
      - start: ship
        steps:
          ship: {type: activity, activity: join.echo, input: {value: "'sent'"}, output: $.order.shipping, next: deeper}
          deeper:
            type: parallel
            branches:
              - start: track
                steps:
                  track: {type: activity, activity: join.echo, input: {value: "`7`"}, output: $.order.tracking.number}
              - start: note
                steps:
                  note: {type: activity, activity: join.echo, input: {value: "'fragile'"}, output: $.notes.carrier}
    next: done
  done: {type: succeed}
"""


def test_branches_writing_fields_of_one_object_keep_all_of_them(make_engine: Any) -> None:
    engine = make_engine(echo)
    engine.publish(NESTED_WRITES)
    with engine.running():
        run = engine.start("nested_join", {"order": {"id": "o-1"}, "notes": {"buyer": "ok"}})
        result = run.result(timeout=30)
    assert result == {
        "order": {
            "id": "o-1",
            "payment": "paid",
            "shipping": "sent",
            "tracking": {"number": 7},
        },
        "notes": {"buyer": "ok", "carrier": "fragile"},
    }
    markers = of_type(run.history(), "MarkerRecorded")
    assert [m.data["change_id"] for m in markers] == ["waypost:join-by-paths"]


def test_a_version_published_under_raised_limits_still_runs(make_engine: Any) -> None:
    steps = {
        f"s{i}": {"type": "activity", "activity": "join.echo", "next": f"s{i + 1}"}
        for i in range(29)
    }
    steps["s29"] = {"type": "succeed", "output": "'done'"}
    definition = {"name": "long", "start": "s0", "steps": steps, "timeout": "P200D"}
    roomy = wp.Limits(max_steps=40, max_total_timeout=365 * 86400.0)
    engine = make_engine(echo)
    with pytest.raises(wp.DefinitionError):
        engine.publish(definition)  # over the default limits
    engine.publish(definition, limits=roomy)
    with engine.running():
        run = engine.start("long", {})
        assert run.result(timeout=60) == "done"
