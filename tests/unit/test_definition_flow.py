"""Map, pass, catch and result in definitions: what validation accepts and refuses (located),
the canonical form, and what the migration check makes of them."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from waypost.model.definitions import DefinitionError, Limits, Problem, parse_definition
from waypost.model.definitions.migration import check_migration, step_reads

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "definitions"


def flow() -> dict[str, Any]:
    """A valid definition with a pass step, a map (with catch and result) and a catch target."""
    return {
        "name": "flow",
        "start": "prepare",
        "steps": {
            "prepare": {
                "type": "pass",
                "set": {"$.total": "sum(lines[].cents)", "$.currency": {"literal": "EUR"}},
                "next": "each",
            },
            "each": {
                "type": "map",
                "items": "lines",
                "max_items": 100,
                "concurrency": 4,
                "tolerate": 2,
                "iterator": {
                    "start": "pay",
                    "steps": {
                        "pay": {
                            "type": "activity",
                            "activity": "pay",
                            "input": {"sku": "item.sku"},
                            "output": "$.receipt",
                            "result": {"id": "id"},
                            "retry": {"max_attempts": 3, "initial_interval": "PT2S"},
                            "catch": [{"errors": ["PaymentDeclined"], "next": "declined"}],
                        },
                        "declined": {"type": "succeed", "output": "error"},
                    },
                },
                "output": "$.receipts",
                "catch": [{"errors": ["*"], "next": "failed", "output": "$.why"}],
                "next": "done",
            },
            "failed": {"type": "fail", "error": "not_paid"},
            "done": {"type": "succeed"},
        },
    }


def problems(source: Any, **kwargs: Any) -> list[Problem]:
    with pytest.raises(DefinitionError) as caught:
        parse_definition(source, **kwargs)
    return caught.value.problems


def at(source: Any, **kwargs: Any) -> dict[str, str]:
    return {problem.path: problem.message for problem in problems(source, **kwargs)}


def test_a_map_pass_and_catch_definition_is_valid_and_indexes_the_iterator() -> None:
    definition = parse_definition(flow(), known_activities=["pay"])
    assert set(definition.all_steps) == {"prepare", "each", "pay", "declined", "failed", "done"}
    assert set(definition.steps) == {"prepare", "each", "failed", "done"}
    assert definition.parents["pay"] == "each" and definition.parents["each"] is None
    assert definition.activities == {"pay"}
    # The canonical form reaches into the iterator (durations in seconds).
    assert definition.all_steps["pay"]["retry"]["initial_interval"] == 2
    # A step reachable only through a catch rule is reachable; so is a published body.
    assert parse_definition(definition.data, published=True).digest == definition.digest


def test_the_example_definition_is_valid() -> None:
    parse_definition((EXAMPLES / "order_lines.yaml").read_text("utf-8"))


def test_a_missing_target_is_located_in_a_catch_rule_and_an_iterator() -> None:
    data = flow()
    data["steps"]["each"]["catch"][0]["next"] = "nowhere"
    data["steps"]["each"]["iterator"]["steps"]["pay"]["catch"][0]["next"] = "done"
    data["steps"]["each"]["iterator"]["start"] = "missing"
    found = at(data)
    assert found["steps.each.catch[0].next"] == "no step 'nowhere'"
    assert found["steps.each.iterator.steps.pay.catch[0].next"].startswith(
        "step 'done' is in another scope"
    )
    assert found["steps.each.iterator.start"] == "no step 'missing'"
    assert found["steps.failed"] == "unreachable from the start step 'prepare'"


def test_bad_expressions_are_located_in_items_set_and_result() -> None:
    data = flow()
    data["steps"]["each"]["items"] = "lines[?"
    data["steps"]["prepare"]["set"]["$.total"] = "sum(("
    data["steps"]["each"]["iterator"]["steps"]["pay"]["result"] = {"id": "nope("}
    found = at(data)
    assert set(found) == {
        "steps.each.items",
        'steps.prepare.set."$.total"',
        "steps.each.iterator.steps.pay.result.id",
    }
    assert all("invalid expression" in message for message in found.values())


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("max_items", 10**9, "at most 1000 (the tenant's max_map_items; found 1000000000)"),
        ("concurrency", 11, "at most 10 (the tenant's max_map_concurrency; found 11)"),
        ("concurrency", 0, "must be at least 1"),
        ("max_items", -1, "must be at least 0"),
        ("tolerate", -3, "must be at least 0"),
        ("tolerate", 101, "101 is more than max_items (100)"),
    ],
)
def test_map_bounds_are_checked(field: str, value: int, message: str) -> None:
    data = flow()
    data["steps"]["each"][field] = value
    assert at(data) == {f"steps.each.{field}": message}


def test_a_tenants_map_limits_decide() -> None:
    data = flow()
    limits = Limits(max_map_items=50, max_map_concurrency=2)
    assert at(data, limits=limits) == {
        "steps.each.max_items": "at most 50 (the tenant's max_map_items; found 100)",
        "steps.each.concurrency": "at most 2 (the tenant's max_map_concurrency; found 4)",
    }
    with pytest.raises(ValueError, match="max_map_items must be a positive integer"):
        Limits(max_map_items=0)


def nested(levels: int) -> dict[str, Any]:
    """A map inside a map's iterator, `levels` deep."""
    step: dict[str, Any] = {"type": "activity", "activity": "pay"}
    for level in reversed(range(levels)):
        step = {
            "type": "map",
            "items": "item",
            "iterator": {"start": f"inner{level + 1}", "steps": {f"inner{level + 1}": step}},
        }
    return {"name": "deep", "start": "inner0", "steps": {"inner0": step}}


def test_maps_inside_maps_nest_only_as_deep_as_the_tenant_allows() -> None:
    parse_definition(nested(2))
    found = at(nested(3))
    assert found == {
        "steps.inner0.iterator.steps.inner1.iterator.steps.inner2": (
            "map steps nest at most 2 deep inside map steps' iterators (found 3): "
            "each level multiplies the items"
        )
    }
    assert list(at(nested(2), limits=Limits(max_map_depth=1))) == [
        "steps.inner0.iterator.steps.inner1"
    ]
    # Maps count toward the depth of parallel and map steps too.
    assert "parallel and map steps nest at most 1 deep (found 2)" in at(
        nested(2), limits=Limits(max_depth=1)
    ).get("steps.inner0.iterator.steps.inner1", "")


def test_catch_rules_are_checked() -> None:
    data = flow()
    data["steps"]["each"]["catch"] = [
        {"errors": ["*", "timeout"], "next": "failed"},
        {"errors": ["*"], "next": "failed"},
        {"errors": ["timeout"], "next": "failed"},
        {"errors": ["bad name!"], "next": "failed"},
    ]
    found = at(data)
    assert found["steps.each.catch[0].errors"] == "'*' stands for every error: list it alone"
    assert found["steps.each.catch[2]"] == (
        "is never used: rule 1 catches every error ('*') before it"
    )
    assert found["steps.each.catch[3].errors[0]"].startswith("must be an error name")


def test_only_steps_that_can_fail_have_catch_and_only_some_have_result() -> None:
    data = flow()
    data["steps"]["done"]["catch"] = [{"errors": ["*"], "next": "failed"}]
    data["steps"]["prepare"]["result"] = "x"
    found = at(data)
    assert found == {"steps.done.catch": "unknown field", "steps.prepare.result": "unknown field"}


def test_result_needs_an_output_and_a_wait_for_a_signal() -> None:
    data = flow()
    del data["steps"]["each"]["output"]
    data["steps"]["each"]["result"] = "[].receipt"
    data["steps"]["nap"] = {
        "type": "wait",
        "duration": 5,
        "output": "$.nap",
        "result": "x",
        "next": "done",
    }
    data["steps"]["failed"] = {"type": "fail", "error": "not_paid"}
    data["steps"]["each"]["catch"].append({"errors": ["late"], "next": "nap"})
    data["steps"]["each"]["catch"].reverse()
    found = at(data)
    assert found == {
        "steps.each.result": "selects what is stored at `output`, but the step has none",
        "steps.nap.result": "only a wait for a signal has a result (its payload)",
    }


def test_what_pass_steps_and_catch_rules_write_counts_for_parallel_branches() -> None:
    branch_a = {"start": "a", "steps": {"a": {"type": "pass", "set": {"$.order.total": "`1`"}}}}
    branch_b = {
        "start": "b",
        "steps": {
            "b": {
                "type": "activity",
                "activity": "pay",
                "catch": [{"errors": ["*"], "next": "b2", "output": "$.order"}],
            },
            "b2": {"type": "succeed"},
        },
    }
    data = {
        "name": "both",
        "start": "both",
        "steps": {"both": {"type": "parallel", "branches": [branch_a, branch_b]}},
    }
    found = at(data)
    assert list(found) == ["steps.both.branches[1].steps.b.catch[0].output"]
    assert "overlaps what branch 0 writes ($.order.total)" in next(iter(found.values()))
    # A map's items write into their own data: only its output counts.
    branch_b["steps"] = {
        "b": {
            "type": "map",
            "items": "xs",
            "iterator": {
                "start": "inner",
                "steps": {"inner": {"type": "pass", "set": {"$.order.total": "`2`"}}},
            },
            "output": "$.many",
        }
    }
    parse_definition(data)


def test_a_loop_through_a_catch_rule_needs_a_bound() -> None:
    data = copy.deepcopy(flow())
    data["steps"]["each"]["catch"] = [
        {"errors": ["timeout"], "next": "prepare"},
        {"errors": ["*"], "next": "failed"},
    ]
    found = at(data)
    assert list(found) == ["steps.prepare"]
    assert found["steps.prepare"].startswith("loop through prepare, each has no bound")


WAITS = """
name: waits
start: each
steps:
  each:
    type: map
    items: orders
    iterator:
      start: approve
      steps:
        approve: {type: approval, approvers: {users: [ann]}}
    output: $.approved
    next: again
  again:
    type: wait
    signal: go
    catch: [{errors: [timeout], next: fix}]
    timeout: P1D
    next: done
  fix:
    type: pass
    set: {$.fixed: "approved[0].outcome"}
    next: done
  done: {type: succeed}
"""


def test_a_run_inside_a_map_item_cannot_be_migrated() -> None:
    definition = parse_definition(WAITS)
    check = check_migration(definition, definition, at="approve", data={}, run_input={}, mapping={})
    assert not check.compatible
    assert check.reasons[0] == (
        "step 'approve' is inside map step 'each' of the old version; only a run waiting "
        "at a top-level approval or wait step can be moved"
    )


def test_the_migration_check_follows_catch_rules_and_reads_items_and_set() -> None:
    definition = parse_definition(WAITS)
    assert step_reads(definition.all_steps["each"]) == [("items", "orders")]
    assert step_reads(definition.all_steps["fix"]) == [('set."$.fixed"', "approved[0].outcome")]
    # `fix` is reached through the catch rule of `again`, and reads what the map stored:
    # a run moved to `again` without `approved` in its data is refused for it.
    check = check_migration(definition, definition, at="again", data={}, run_input={}, mapping={})
    assert any("step 'fix' of the new version reads 'approved'" in r for r in check.reasons)
    fine = check_migration(
        definition, definition, at="again", data={"approved": []}, run_input={}, mapping={}
    )
    assert fine.compatible
