"""`on_cancel` in the definition format: its values, its static rule, its digest, and what a
migration between versions that differ in it says."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from waypost.model.definitions import DefinitionError, definition_schema, parse_definition
from waypost.model.definitions.migration import check_migration


def trip(**extra: Any) -> dict[str, Any]:
    return {
        "name": "trip",
        "start": "book",
        "steps": {
            "book": {
                "type": "activity",
                "activity": "hotel.book",
                "output": "$.hotel",
                "compensate": {"activity": "hotel.release", "input": {"id": "hotel.id"}},
                "next": "confirm",
            },
            "confirm": {"type": "wait", "signal": "confirmed", "next": "done"},
            "done": {"type": "succeed"},
        },
        **extra,
    }


def test_on_cancel_defaults_to_none_and_takes_compensate() -> None:
    assert parse_definition(trip()).on_cancel == "none"
    assert parse_definition(trip(on_cancel="none")).on_cancel == "none"
    compensating = parse_definition(trip(on_cancel="compensate"))
    assert compensating.on_cancel == "compensate"
    assert compensating.data["on_cancel"] == "compensate"
    # It is content: another value is another version.
    assert compensating.digest != parse_definition(trip()).digest
    jsonschema.validate(trip(on_cancel="compensate"), definition_schema())


@pytest.mark.parametrize("value", ["Compensate", "undo", "", 1, True, None, ["compensate"]])
def test_other_values_of_on_cancel_are_refused_at_their_location(value: Any) -> None:
    with pytest.raises(DefinitionError) as caught:
        parse_definition(trip(on_cancel=value))
    assert [p.path for p in caught.value.problems] == ["on_cancel"]


def test_compensate_needs_a_step_that_can_be_compensated() -> None:
    data = trip(on_cancel="compensate")
    del data["steps"]["book"]["compensate"]
    with pytest.raises(DefinitionError) as caught:
        parse_definition(data)
    (problem,) = caught.value.problems
    assert problem.path == "on_cancel"
    assert "no step has one" in problem.message
    # A version published before the rule still loads.
    assert parse_definition(data, published=True).on_cancel == "compensate"


def test_a_compensation_inside_a_parallel_branch_counts() -> None:
    data = trip(on_cancel="compensate")
    book = data["steps"].pop("book")
    data["start"] = "split"
    data["steps"]["split"] = {
        "type": "parallel",
        "branches": [
            {
                "start": "book",
                "steps": {"book": {**book, "next": "booked"}, "booked": {"type": "succeed"}},
            }
        ],
        "next": "confirm",
    }
    assert parse_definition(data).on_cancel == "compensate"


@pytest.mark.parametrize(
    ("source", "target", "note"),
    [
        ("none", "compensate", "it compensates its completed steps first"),
        ("compensate", "none", "it no longer compensates its completed steps"),
    ],
)
def test_a_migration_that_changes_on_cancel_says_so(source: str, target: str, note: str) -> None:
    old = parse_definition(trip(on_cancel=source))
    new = parse_definition(trip(on_cancel=target))
    check = check_migration(old, new, at="confirm", data={}, run_input={}, mapping={})
    assert check.compatible, check.reasons
    assert [n for n in check.notes if "cancelled" in n] == [
        next(n for n in check.notes if note in n)
    ]
    same = check_migration(old, old, at="confirm", data={}, run_input={}, mapping={})
    assert [n for n in same.notes if "cancelled" in n] == []
