"""Publishing definitions on both stores: immutable versions identified by their digest."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

import waypost as wp
from tests.helpers import db_query

ROOT = Path(__file__).resolve().parents[2]
PURCHASE = (ROOT / "examples" / "definitions" / "purchase_order.yaml").read_text()


def test_publish_freezes_versions_and_identical_content_returns_the_same(
    make_engine: Any,
) -> None:
    engine = make_engine()
    first = engine.publish(PURCHASE, by="ops")
    assert (first.name, first.version, first.created) == ("purchase_order", 1, True)
    # The same content in another form (JSON, other key order) is the same version.
    as_json = json.dumps(yaml.safe_load(PURCHASE), sort_keys=False)
    again = engine.publish(as_json)
    assert (again.version, again.digest, again.created) == (1, first.digest, False)
    changed = yaml.safe_load(PURCHASE)
    changed["description"] = "v2: a different text"
    second = engine.publish(changed)
    assert (second.version, second.created) == (2, True) and second.digest != first.digest
    assert [(d.name, d.version) for d in engine.definitions()] == [
        ("purchase_order", 1),
        ("purchase_order", 2),
    ]
    assert engine.definition("purchase_order").version == 2
    assert engine.definition("purchase_order", 1).source == PURCHASE
    assert engine.definition("purchase_order", 1).published_by == "ops"
    with pytest.raises(LookupError):
        engine.definition("purchase_order", 3)


def test_invalid_definitions_publish_nothing(make_engine: Any) -> None:
    engine = make_engine()
    bad = (ROOT / "examples" / "definitions" / "invalid.yaml").read_text()
    with pytest.raises(wp.DefinitionError) as caught:
        engine.publish(bad)
    assert len(caught.value.problems) > 5
    with pytest.raises(wp.DefinitionError, match="at most 20 steps"):
        engine.publish(
            {
                "name": "long",
                "start": "s1",
                "steps": {
                    f"s{i}": {"type": "wait", "duration": 1, "next": f"s{i + 1}"}
                    if i < 21
                    else {"type": "succeed"}
                    for i in range(1, 22)
                },
            }
        )
    assert engine.definitions() == []
    assert db_query(engine.url, "SELECT count(*) FROM definitions") == [(0,)]


def test_definitions_are_per_tenant(make_engine: Any) -> None:
    engine = make_engine()
    engine.publish(PURCHASE, tenant="acme")
    assert engine.definitions(tenant="other") == []
    with pytest.raises(LookupError):
        engine.definition("purchase_order", tenant="other")
    assert engine.publish(PURCHASE, tenant="other").version == 1  # its own numbering


@wp.activity(name="charge_card")
def charge_card(ctx: wp.ActivityContext, amount: int) -> int:
    return amount


def test_activity_names_are_checked_against_the_engines_registry(make_engine: Any) -> None:
    engine = make_engine(charge_card)
    with pytest.raises(wp.DefinitionError, match="unknown activity"):
        engine.publish(PURCHASE)
