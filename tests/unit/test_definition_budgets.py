"""What a tenant's definition makes the engine compute is bounded: expressions, nesting, inputs.

Each test is an attack a tenant could publish: an expression whose value doubles at
every step, structures nested thousands deep, input schemas that never end. Each
must end quickly with a clear, located error.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from waypost.model.definitions import (
    DefinitionError,
    ExpressionError,
    Limits,
    Problem,
    compile_expression,
    parse_definition,
)
from waypost.model.definitions.expressions import Budget, evaluate_mapping

pytestmark = pytest.mark.timeout(30)

DOUBLING = "[@, @] | " * 60 + "@"
"""A short expression whose value has 2**60 leaves (shared in memory, not in JSON)."""

STRING_DOUBLING = "s" + " | join('', [@, @])" * 45
"""A short expression whose string doubles at each step, really in memory."""


def problems(source: Any, **kwargs: Any) -> list[Problem]:
    with pytest.raises(DefinitionError) as caught:
        parse_definition(source, **kwargs)
    return caught.value.problems


def nested_list(depth: int, leaf: Any = 1) -> Any:
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


def nested_object(depth: int, leaf: Any = 1) -> Any:
    value = leaf
    for _ in range(depth):
        value = {"a": value}
    return value


def definition(**extra: Any) -> dict[str, Any]:
    return {
        "name": "d",
        "start": "go",
        "steps": {
            "go": {"type": "activity", "activity": "work", "next": "done"},
            "done": {"type": "succeed"},
        },
        **extra,
    }


# == expression budget ==========================================================


def test_a_value_that_doubles_at_each_step_is_stopped_while_it_grows() -> None:
    started = time.monotonic()
    with pytest.raises(ExpressionError, match=r"larger than 1000000 characters"):
        compile_expression(DOUBLING).evaluate({"a": 1})
    assert time.monotonic() - started < 2


def test_a_string_that_doubles_at_each_step_is_stopped_while_it_grows() -> None:
    started = time.monotonic()
    with pytest.raises(ExpressionError, match=r"larger than 1000000 characters"):
        compile_expression(STRING_DOUBLING).evaluate({"s": "ab"})
    assert time.monotonic() - started < 2


def test_the_number_of_steps_is_bounded() -> None:
    data = {"items": list(range(110_000))}
    with pytest.raises(ExpressionError, match=r"more than 100000 steps"):
        compile_expression("items[?@ > `-1`]").evaluate(data)
    # A smaller list within the budget is fine, and a budget can be raised.
    assert len(compile_expression("items[?@ > `-1`]").evaluate({"items": list(range(100))})) == 100
    big = Budget(max_steps=1_000_000, max_size=10_000_000)
    assert len(compile_expression("items[?@ > `-1`]").evaluate(data, big)) == 110_000


def test_a_budget_comes_from_the_tenants_limits() -> None:
    limits = Limits(max_expression_steps=10, max_expression_size=100)
    budget = limits.expression_budget()
    assert (budget.max_steps, budget.max_size) == (10, 100)
    with pytest.raises(ExpressionError, match="more than 10 steps"):
        compile_expression("[a, a, a, a, a, a, a, a, a, a, a]").evaluate({"a": 1}, budget)
    with pytest.raises(ExpressionError, match="larger than 100 characters"):
        compile_expression("join('', [a, a])").evaluate({"a": "x" * 60}, budget)
    with pytest.raises(ValueError, match="max_expression_steps"):
        Limits(max_expression_steps=0)


def test_reading_large_data_is_not_building_it() -> None:
    # Reading a field hands back what is there; only what the expression builds is measured.
    data = {"blob": "x" * 2_000_000, "n": 1}
    assert len(compile_expression("blob").evaluate(data)) == 2_000_000
    assert compile_expression("n").evaluate(data) == 1


def test_mappings_use_the_budget() -> None:
    with pytest.raises(ExpressionError, match="larger than"):
        evaluate_mapping({"x": DOUBLING}, {"a": 1})
    small = Budget(max_steps=5, max_size=1000)
    with pytest.raises(ExpressionError, match="more than 5 steps"):
        evaluate_mapping({"x": "[a, a, a, a, a, a]"}, {"a": 1}, small)


def test_a_number_json_cannot_hold_is_an_expression_error() -> None:
    with pytest.raises(ExpressionError, match="JSON"):
        compile_expression("to_number('1.0e999')").evaluate({})
    with pytest.raises(ExpressionError):
        compile_expression("ceil(to_number('1.0e999'))").evaluate({})
    big = 10**4299
    with pytest.raises(ExpressionError, match="more than 300 digits"):
        compile_expression("sum(xs)").evaluate({"xs": [big] * 20})
    assert compile_expression("sum(xs)").evaluate({"xs": [10**200] * 2}) == 2 * 10**200


# == nesting ====================================================================


def test_an_expression_nested_too_deep_is_refused_when_compiled() -> None:
    for text in (
        "!" * 900 + "a",
        "a" + " && a" * 150,
        "[" * 300 + "a" + "]" * 300,
        "`" + "[" * 400 + "]" * 400 + "`",
    ):
        with pytest.raises(ExpressionError, match="nested more than"):
            compile_expression(text)


def test_an_expression_nested_too_deep_is_a_located_problem() -> None:
    data = definition()
    data["steps"]["go"]["input"] = {"x": "!" * 900 + "a"}
    found = problems(data)
    assert [p.path for p in found] == ["steps.go.input.x"]
    assert "nested more than" in found[0].message


@pytest.mark.parametrize("kind", ["json", "yaml", "dict"])
def test_a_definition_nested_thousands_deep_is_a_located_problem(kind: str) -> None:
    data = definition()
    data["steps"]["go"]["input"] = {"x": {"literal": nested_list(5000)}}
    source: Any = data
    if kind == "json":
        data["steps"]["go"]["input"] = {"x": {"literal": "HERE"}}
        source = json.dumps(data).replace('"HERE"', "[" * 5000 + "1" + "]" * 5000)
    elif kind == "yaml":
        source = "name: d\nstart: go\nsteps:\n  go:\n    type: activity\n    activity: work\n"
        source += "    input: {x: {literal: " + "[" * 5000 + "1" + "]" * 5000 + "}}\n"
    found = problems(source, limits=Limits(max_definition_bytes=100_000))
    assert len(found) == 1
    assert "nested more than 64 levels deep" in found[0].message
    if kind == "dict":
        assert found[0].path.startswith("steps.go.input.x.literal[0][0]")
    else:
        assert "line" in found[0].message


def test_an_input_schema_nested_thousands_deep_is_a_located_problem() -> None:
    found = problems(
        definition(input=nested_object(3000, {"type": "string"})),
        limits=Limits(max_definition_bytes=100_000),
    )
    assert len(found) == 1
    assert "nested more than 64 levels deep" in found[0].message


def test_a_definition_at_the_depth_limit_is_valid() -> None:
    data = definition()
    data["steps"]["go"]["input"] = {"x": {"literal": nested_list(58)}}
    schema: Any = {"type": "string"}
    for _ in range(30):
        schema = {"type": "object", "properties": {"a": schema}}
    data["input"] = schema
    parsed = parse_definition(data)
    assert parsed.name == "d"
    parse_definition(json.dumps(data))


def test_a_huge_integer_is_a_problem_not_a_crash() -> None:
    digits = "9" * 5000
    yaml_text = f"name: d\nstart: go\nsteps:\n  go: {{type: succeed, output: '`{digits}`'}}\n"
    yaml_text2 = f"name: d\nstart: go\nsteps:\n  go: {{type: choice, max_iterations: {digits}, choices: [{{when: a, next: go}}]}}\n"
    json_text = (
        '{"name": "d", "start": "go", "steps": {"go": {"type": "wait", "duration": '
        + digits
        + "}}}"
    )
    for source in (yaml_text2, json_text):
        found = problems(source)
        assert found, source[:40]
    # A JMESPath literal of that size is an expression problem, located.
    found = problems(yaml_text)
    assert [p.path for p in found] == ["steps.go.output"]


# == input schemas ==============================================================


@pytest.mark.parametrize(
    ("schema", "path", "message"),
    [
        ({"$ref": "#"}, "input.$ref", "never end"),
        (
            {"$defs": {"a": {"allOf": [{"$ref": "#/$defs/a"}]}}, "$ref": "#/$defs/a"},
            "input.$defs.a.allOf[0].$ref",
            "never end",
        ),
        ({"anyOf": [{"$ref": "#/anyOf/1"}, {"not": {"$ref": "#/anyOf/0"}}]}, "input", "never end"),
        ({"$ref": "https://example.com/schema.json"}, "input.$ref", "within the schema"),
        (
            {"properties": {"a": {"$ref": "#/$defs/missing"}}},
            "input.properties.a.$ref",
            "no schema",
        ),
        ({"properties": {"a": {"$ref": "#nowhere"}}}, "input.properties.a.$ref", "no anchor"),
        (
            {"properties": {"a": {"$id": "other", "type": "string"}}},
            "input.properties.a.$id",
            "top",
        ),
    ],
)
def test_input_schema_references_stay_inside_and_end(
    schema: dict[str, Any], path: str, message: str
) -> None:
    found = problems(definition(input=schema))
    assert found
    assert found[0].path.startswith(path)
    assert message in found[0].message


def test_recursive_input_schemas_that_descend_are_fine() -> None:
    tree = {
        "$defs": {
            "node": {
                "type": "object",
                "properties": {"children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
            }
        },
        "$ref": "#/$defs/node",
        "properties": {"$ref": {"type": "string"}},  # a property named "$ref" is no reference
    }
    parsed = parse_definition(definition(input=tree))
    from waypost.model.definitions import input_problems

    assert input_problems(parsed, {"children": [{"children": []}]}) == []
    assert input_problems(parsed, {"children": [{"children": 3}]})[0].path == (
        "input.children[0].children"
    )


def test_a_run_input_nested_too_deep_is_an_input_problem() -> None:
    from waypost.model.definitions import input_problems

    for schema in (None, {"type": "object"}):
        parsed = parse_definition(definition(**({"input": schema} if schema else {})))
        found = input_problems(parsed, {"a": nested_list(5000)})
        assert len(found) == 1
        assert found[0].path.startswith("input.a[0][0]")
        assert found[0].message == "nested more than 64 levels deep"
        assert input_problems(parsed, {"a": nested_list(60)}) == []


def test_the_codec_refuses_a_value_nested_too_deep() -> None:
    from waypost.errors import PayloadError
    from waypost.model.codec import JsonCodec

    with pytest.raises(PayloadError, match="nested too deeply"):
        JsonCodec().encode(nested_list(100_000))


# == parallel writes ============================================================


def parallel(*outputs: list[str]) -> dict[str, Any]:
    branches = []
    for index, locations in enumerate(outputs):
        steps: dict[str, Any] = {}
        for number, location in enumerate(locations):
            step: dict[str, Any] = {"type": "activity", "activity": "work", "output": location}
            if number + 1 < len(locations):
                step["next"] = f"b{index}s{number + 1}"
            steps[f"b{index}s{number}"] = step
        branches.append({"start": f"b{index}s0", "steps": steps})
    return {
        "name": "p",
        "start": "both",
        "steps": {
            "both": {"type": "parallel", "branches": branches, "next": "done"},
            "done": {"type": "succeed"},
        },
    }


def test_branches_writing_overlapping_paths_are_refused_where_they_clash() -> None:
    found = problems(parallel(["$.order.payment"], ["$.order.shipping", "$.order"]))
    assert [p.path for p in found] == ["steps.both.branches[1].steps.b1s1.output"]
    assert "overlaps what branch 0 writes ($.order.payment)" in found[0].message
    found = problems(parallel(["$.x"], ["$.y"], ["$.x"]))
    assert [p.path for p in found] == ["steps.both.branches[2].steps.b2s0.output"]


def test_branches_writing_different_fields_are_fine() -> None:
    parse_definition(parallel(["$.order.payment", "$.order.payment.id"], ["$.order.shipping"]))


def test_a_published_body_is_read_without_the_rules_that_came_after_it() -> None:
    body = parallel(["$.x"], ["$.x"])
    body["input"] = {"$ref": "https://example.com/s.json"}
    body["steps"]["both"]["branches"][0]["steps"]["b0s0"]["input"] = {"v": "!" * 100 + "a"}
    body["steps"]["both"]["next"] = "extra0"
    for number in range(25):  # more steps than the default limit
        following = f"extra{number + 1}" if number < 24 else "done"
        body["steps"][f"extra{number}"] = {"type": "activity", "activity": "w", "next": following}
    assert len(problems(body)) > 3
    # A version stored earlier must still load: its runs depend on it.
    assert parse_definition(body, published=True).name == "p"


# == patterns ===================================================================


def test_a_catastrophic_pattern_is_matched_in_linear_time() -> None:
    from waypost.model.definitions import input_problems

    schema = {
        "type": "object",
        "properties": {"code": {"type": "string", "pattern": "^(a+)+$"}},
        "propertyNames": {"pattern": "^(x|x)*[a-z]+$"},
    }
    parsed = parse_definition(definition(input=schema))
    started = time.monotonic()
    found = input_problems(parsed, {"code": "a" * 50_000 + "!"})
    assert time.monotonic() - started < 1
    assert [p.path for p in found] == ["input.code"]
    assert "does not match" in found[0].message
    assert input_problems(parsed, {"code": "aaa"}) == []
    assert input_problems(parsed, {"code": "aaa", "Bad": 1})[0].message.endswith(
        "does not match '^(x|x)*[a-z]+$'"
    )


def test_patterns_that_need_backtracking_and_pattern_properties_are_refused() -> None:
    schema = {
        "properties": {
            "a": {"type": "string", "pattern": "(a)\\1"},
            "b": {"type": "string", "pattern": "x(?=y)"},
            "c": {"type": "object", "patternProperties": {"^(a+)+$": {}}},
        }
    }
    found = sorted(problems(definition(input=schema)), key=lambda p: p.path)
    assert [p.path for p in found] == [
        "input.properties.a.pattern",
        "input.properties.b.pattern",
        "input.properties.c.patternProperties",
    ]
    assert "back-references and look-arounds" in found[0].message
    assert "propertyNames" in found[2].message


# == loops that never wait ======================================================


def test_a_loop_that_never_waits_is_refused() -> None:
    spin = {
        "name": "spin",
        "start": "again",
        "steps": {
            "again": {
                "type": "choice",
                "max_iterations": 10000,
                "choices": [{"when": "go", "next": "other"}],
                "default": "done",
            },
            "other": {
                "type": "choice",
                "choices": [{"when": "go", "next": "again"}],
                "default": "done",
            },
            "done": {"type": "succeed"},
        },
    }
    found = problems(spin)
    assert [p.path for p in found] == ["steps.again"]
    assert "never waits for anything" in found[0].message
    # With an activity on it, each turn waits (and may change the data).
    spin["steps"]["other"] = {"type": "activity", "activity": "w", "next": "again"}
    parse_definition(spin)


# == text no store holds, quadratic checks, long lists ===========================


def test_text_no_store_can_hold_is_a_located_problem() -> None:
    for bad, message in (("x\x00y", "NUL"), ("x\ud800y", "surrogate")):
        found = problems(definition(description=bad))
        assert [p.path for p in found] == ["description"]
        assert message in found[0].message
        text = json.dumps(definition(description=bad))  # escaped: valid UTF-8 JSON text
        assert [p.path for p in problems(text)] == ["description"]


def test_a_run_input_no_store_can_hold_is_an_input_problem() -> None:
    from waypost.model.definitions import input_problems

    parsed = parse_definition(definition())
    found = input_problems(parsed, {"note": ["ok", "nul\x00"]})
    assert [(p.path, p.message) for p in found] == [
        ("input.note[1]", "contains a NUL character, which cannot be stored")
    ]


def test_unique_items_is_checked_in_linear_time() -> None:
    from waypost.model.definitions import input_problems

    schema = {"type": "object", "properties": {"xs": {"type": "array", "uniqueItems": True}}}
    parsed = parse_definition(definition(input=schema))
    many = [{"id": i, "tags": [i, "x"]} for i in range(20_000)]
    started = time.monotonic()
    assert input_problems(parsed, {"xs": many}) == []
    # a pairwise check would make 2e8 comparisons (minutes); linear takes well under a
    # second, so the bound is loose enough for a loaded machine and still catches it
    assert time.monotonic() - started < 20
    found = input_problems(parsed, {"xs": [*many, {"tags": [1.0, "x"], "id": 1}]})
    assert [p.path for p in found] == ["input.xs"]
    assert "non-unique" in found[0].message
    assert input_problems(parsed, {"xs": [1, True, "1"]}) == []  # true is not 1


def test_an_input_error_lists_a_bounded_number_of_problems() -> None:
    from waypost.model.definitions import input_problems

    schema = {
        "type": "object",
        "properties": {"xs": {"type": "array", "items": {"type": "string"}}},
    }
    parsed = parse_definition(definition(input=schema))
    found = input_problems(parsed, {"xs": list(range(10_000))})
    assert len(found) == 51
    assert found[-1].message == "and more: only the first 50 are listed"


def test_a_draft_3_input_schema_is_refused() -> None:
    schema = {"$schema": "http://json-schema.org/draft-03/schema#", "extends": {"$ref": "#"}}
    found = problems(definition(input=schema))
    assert "input.$schema" in [p.path for p in found]


def test_a_schema_that_applies_subschemas_exponentially_often_is_stopped() -> None:
    from waypost.model.definitions import input_problems

    # No loop, 40 definitions: each applies the next twice, 2**40 applications in all.
    defs: dict[str, Any] = {
        f"d{i}": {"allOf": [{"$ref": f"#/$defs/d{i + 1}"}] * 2} for i in range(40)
    }
    defs["d40"] = {"type": "object"}
    parsed = parse_definition(definition(input={"$defs": defs, "$ref": "#/$defs/d0"}))
    started = time.monotonic()
    found = input_problems(parsed, {"a": 1})
    assert time.monotonic() - started < 10
    assert [p.path for p in found] == ["input"]
    assert "more than 100000 steps (max_input_checks)" in found[0].message
    found = input_problems(parsed, {"a": 1}, Limits(max_input_checks=50))
    assert "more than 50 steps" in found[0].message


# == the budgeted interpreter is JMESPath's ======================================

_SAMPLES = [
    "a",
    "a.b",
    "a[0]",
    "a[*].b",
    "a[?b > `1`].c",
    "a[].b",
    "a[:2]",
    "*.b",
    "{x: a, y: b}",
    "[a, b]",
    "a || b",
    "a && b",
    "!a",
    "a == b",
    "length(a)",
    "keys(@)",
    "sort_by(a, &b)",
    "max_by(a, &b)",
    "to_string(a)",
    "not_null(a, b)",
    "a | [0]",
]

_json = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.text("ab", max_size=3),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from("abc"), inner),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(expression=st.sampled_from(_SAMPLES), data=st.dictionaries(st.sampled_from("abc"), _json))
def test_evaluation_gives_what_jmespath_gives(expression: str, data: dict[str, Any]) -> None:
    import jmespath
    import jmespath.exceptions

    try:
        expected: Any = jmespath.search(expression, data)
    except (jmespath.exceptions.JMESPathError, TypeError):
        # jmespath itself raises TypeError ordering a string against a number
        # (`a[?b > \`1\`]` where b is text): our evaluator fails the expression with
        # ExpressionError there, never with a bare TypeError.
        expected = ExpressionError
    try:
        got: Any = compile_expression(expression).evaluate(data)
    except ExpressionError:
        got = ExpressionError
    assert got == expected
