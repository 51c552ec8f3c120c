"""The console's definition graph and version diff: pure functions, no server."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from waypost.model.definitions import parse_definition
from waypost.server.console.diff import canonical_yaml, side_by_side
from waypost.server.console.graph import render_graph

EXAMPLES = Path(__file__).parents[2] / "examples" / "definitions"
SVG = "{http://www.w3.org/2000/svg}"


def _parsed(svg: str) -> ET.Element:
    return ET.fromstring(svg)  # raises on anything that is not well-formed XML


def _steps(root: ET.Element) -> dict[str, ET.Element]:
    return {g.get("data-step", ""): g for g in root.iter(f"{SVG}g") if g.get("data-step")}


def _edges(root: ET.Element) -> set[tuple[str, str]]:
    return {
        (g.get("data-from", ""), g.get("data-to", ""))
        for g in root.iter(f"{SVG}g")
        if g.get("class") == "wp-edge"
    }


def _centre_y(group: ET.Element) -> float:
    rect = group.find(f"{SVG}rect")
    assert rect is not None
    return float(rect.get("y", "nan"))


def test_purchase_order_is_drawn_with_every_step_and_transition() -> None:
    definition = parse_definition((EXAMPLES / "purchase_order.yaml").read_text())
    root = _parsed(render_graph(definition))
    steps = _steps(root)
    assert set(steps) == set(definition.all_steps)
    edges = _edges(root)
    assert ("reserve_budget", "needs_approval") in edges
    assert ("needs_approval", "director_approval") in edges  # a choice
    assert ("needs_approval", "place_order") in edges  # its default
    assert ("manager_approval", "rejected") in edges  # on_reject / on_expiry
    assert ("await_goods", "not_delivered") in edges  # on_timeout
    # Layered top to bottom: each forward transition goes down.
    for source, target in [("reserve_budget", "needs_approval"), ("place_order", "pay")]:
        assert _centre_y(steps[source]) < _centre_y(steps[target])
    # The choice's condition labels its edge.
    assert "amount &gt; `10000`" in render_graph(definition)


def test_states_colour_the_steps_and_unknown_states_are_shown_as_written() -> None:
    definition = parse_definition((EXAMPLES / "purchase_order.yaml").read_text())
    states = {
        "reserve_budget": "completed",
        "manager_approval": "waiting",
        "place_order": "weird<state>",
    }
    root = _parsed(render_graph(definition, states))
    steps = _steps(root)
    assert steps["reserve_budget"].get("class") == "wp-step wp-state-completed"
    assert steps["manager_approval"].get("data-state") == "waiting"
    assert steps["place_order"].get("class") == "wp-step wp-state-other"
    assert steps["place_order"].get("data-state") == "weird<state>"
    assert steps["pay"].get("class") == "wp-step wp-state-none"
    fills = {name: g.find(f"{SVG}rect").get("fill") for name, g in steps.items()}  # type: ignore[union-attr]
    assert fills["reserve_budget"] != fills["pay"] != fills["manager_approval"]


def test_parallel_branches_fan_out_and_join() -> None:
    definition = parse_definition(
        {
            "name": "fan",
            "start": "split",
            "steps": {
                "split": {
                    "type": "parallel",
                    "branches": [
                        {"start": "a", "steps": {"a": {"type": "activity", "activity": "x"}}},
                        {
                            "start": "b1",
                            "steps": {
                                "b1": {"type": "activity", "activity": "x", "next": "b2"},
                                "b2": {"type": "activity", "activity": "x"},
                            },
                        },
                    ],
                    "next": "done",
                },
                "done": {"type": "succeed"},
            },
        },
    )
    root = _parsed(render_graph(definition))
    edges = _edges(root)
    assert {("split", "a"), ("split", "b1"), ("b1", "b2"), ("a", "done"), ("b2", "done")} <= edges
    assert ("split", "done") not in edges  # reached through the branches
    steps = _steps(root)
    assert _centre_y(steps["split"]) < _centre_y(steps["a"]) < _centre_y(steps["done"])
    assert _centre_y(steps["b2"]) < _centre_y(steps["done"])


def test_a_loop_is_drawn_with_a_dashed_back_edge() -> None:
    definition = parse_definition(
        {
            "name": "loop",
            "start": "work",
            "steps": {
                "work": {"type": "activity", "activity": "x", "next": "again"},
                "again": {
                    "type": "choice",
                    "choices": [{"when": "retry", "next": "work"}],
                    "default": "done",
                    "max_iterations": 3,
                },
                "done": {"type": "succeed"},
            },
        },
    )
    root = _parsed(render_graph(definition))
    back = [
        g
        for g in root.iter(f"{SVG}g")
        if g.get("class") == "wp-edge" and g.get("data-to") == "work"
    ]
    assert len(back) == 1 and back[0].get("stroke-dasharray")
    steps = _steps(root)
    assert _centre_y(steps["work"]) < _centre_y(steps["again"]) < _centre_y(steps["done"])


@pytest.mark.parametrize(
    "hostile",
    [
        "</svg><script>alert(1)</script>",
        '" onload="alert(1)',
        "\x00\x01\x1b[31m\ufffe",
        "\ud800",
        "x" * 10_000,
    ],
)
def test_every_text_is_escaped(hostile: str) -> None:
    data: dict[str, Any] = {
        "name": hostile,
        "start": "a",
        "steps": {
            "a": {
                "type": "choice",
                "choices": [{"when": hostile, "next": "b"}],
                "default": "b",
            },
            "b": {"type": hostile},
        },
    }
    svg = render_graph(data, {"a": hostile, "b": hostile}, title=hostile)
    root = _parsed(svg)  # well-formed: nothing broke out of its element or attribute
    assert "<script" not in svg
    assert not [e for e in root.iter() if e.tag.endswith("script")]
    assert all(not name.startswith("on") for e in root.iter() for name in e.attrib)
    assert len(svg) < 20_000  # long texts are shortened on the drawing


def test_an_empty_or_broken_body_still_draws() -> None:
    for data in ({}, {"steps": {"a": "not a step"}}, {"start": "nowhere", "steps": {}}):
        _parsed(render_graph(data))
    root = _parsed(render_graph({"start": "a", "steps": {"a": {"type": "x", "next": "gone"}}}))
    assert set(_steps(root)) == {"a"} and not _edges(root)


def test_diff_of_two_versions_side_by_side() -> None:
    v1 = parse_definition((EXAMPLES / "purchase_order.yaml").read_text())
    v2 = parse_definition((EXAMPLES / "purchase_order_v2.yaml").read_text())
    old, new = canonical_yaml(v1.data), canonical_yaml(v2.data)
    rows = side_by_side(old, new)
    kinds = {row.kind for row in rows}
    assert kinds & {"replace", "insert", "delete"}
    # Every changed line of either side appears on its side, numbered, and in order.
    left = [row.left_number for row in rows if row.left_number is not None]
    right = [row.right_number for row in rows if row.right_number is not None]
    assert left == sorted(left) and right == sorted(right)
    shown_old = {row.left for row in rows if row.kind != "fold" and row.left_number}
    shown_new = {row.right for row in rows if row.kind != "fold" and row.right_number}
    for line in set(old.splitlines()) ^ set(new.splitlines()):
        assert line in shown_old | shown_new


def test_diff_folds_long_unchanged_stretches() -> None:
    old = "\n".join(f"line {i}" for i in range(100))
    new = old.replace("line 50", "line fifty")
    rows = side_by_side(old, new, context=3)
    assert [row.kind for row in rows].count("fold") == 2
    changed = [row for row in rows if row.kind == "replace"]
    assert [(r.left_number, r.left, r.right_number, r.right) for r in changed] == [
        (51, "line 50", 51, "line fifty")
    ]
    assert len(rows) == 2 + 3 + 1 + 3 + 0  # fold, 3 context, change, 3 context, fold
    assert side_by_side(old, old)[0].kind == "fold"
    assert side_by_side("", "") == []


def test_canonical_yaml_reads_back_to_the_same_body() -> None:
    import yaml

    definition = parse_definition((EXAMPLES / "purchase_order.yaml").read_text())
    text = canonical_yaml(definition.data)
    assert yaml.safe_load(text) == definition.data
    assert re.search(r"^name: purchase_order$", text, re.M)
    # Map iterators, catch rules and pass steps' `$.` keys read back too, to the same digest.
    lines = parse_definition((EXAMPLES / "order_lines.yaml").read_text())
    again = parse_definition(canonical_yaml(lines.data))
    assert again.data == lines.data and again.digest == lines.digest


def test_a_choice_the_run_went_through_counts_as_completed() -> None:
    from waypost.server.console.graph import passed_choices

    definition = parse_definition((EXAMPLES / "purchase_order.yaml").read_text())
    reached = {"reserve_budget": "completed", "manager_approval": "waiting"}
    states = passed_choices(definition.data, reached)
    assert states["needs_approval"] == "completed"
    assert "director_approval" not in states and reached == {
        "reserve_budget": "completed",
        "manager_approval": "waiting",
    }
    assert "needs_approval" not in passed_choices(definition.data, {"reserve_budget": "running"})


def test_a_map_with_its_iterator_a_pass_step_and_dashed_catch_edges() -> None:
    definition = parse_definition((EXAMPLES / "order_lines.yaml").read_text())
    svg = render_graph(definition)
    root = _parsed(svg)
    steps = _steps(root)
    assert set(steps) == set(definition.all_steps)  # the iterator's step included
    assert "map" in (steps["charge_lines"].findtext(f"{SVG}title") or "")
    assert "pass" in (steps["totals"].findtext(f"{SVG}title") or "")
    edges = _edges(root)
    assert ("totals", "charge_lines") in edges
    assert ("charge_lines", "charge") in edges  # into the iterator: "each item"
    assert ("charge", "ship") in edges  # the iterator's end joins at the map's next
    assert ("charge_lines", "ship") not in edges  # reached through the iterator only
    catches = [g for g in root.iter(f"{SVG}g") if g.get("class") == "wp-edge wp-catch"]
    assert [(g.get("data-from"), g.get("data-to")) for g in catches] == [
        ("charge_lines", "declined")
    ]
    drawn = catches[0].find(f"{SVG}path")
    assert drawn is not None and catches[0].get("stroke-dasharray")
    assert "catch activity_failed" in "".join(catches[0].itertext())
    assert "each item" in svg
    # Layered: the iterator's step below its map.
    assert _centre_y(steps["charge_lines"]) < _centre_y(steps["charge"])
