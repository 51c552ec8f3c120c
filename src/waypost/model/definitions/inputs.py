"""A definition's input schema: what it may use, and checking a run's input against it.

The input schema is the tenant's JSON Schema, and validating a run's input runs
it on the engine's event loop, so it must end, and quickly, whatever the tenant
wrote. Decisions:

- References stay inside the schema: `$ref` (and `$dynamicRef`,
  `$recursiveRef`) must start with `#` and point at a part of the schema. A
  remote reference would make the engine fetch a URL of the tenant's choosing
  at every start; validators here are also built with a registry that
  retrieves nothing, whatever they are given.
- `$id` only at the top, so that every `#...` reference means this schema.
- No reference loop that goes round without descending into the input
  (`{"$ref": "#"}`, or `a` -> `allOf` -> `a`): it never ends, for any input.
  A loop through `properties`, `items` and the like is fine (each turn goes
  one level down a finite input).
- Nesting is bounded by the definition's (`MAX_NESTING`), and a run's input is
  refused beyond it before the schema sees it, as is text no store can hold
  (NUL, half a surrogate pair). `uniqueItems` is checked in linear time.
  An InputError lists at most `MAX_LISTED` problems.
- Checking one input applies at most so many keywords (each keyword on each
  value counts; `Limits.max_input_checks`, `MAX_INPUT_CHECKS` by default),
  whatever the schema does: references can form a DAG that applies a
  subschema exponentially often without a loop. Counting, not timing: the
  same input is refused or accepted on any machine.
- Draft 3 schemas are refused: their `extends` and schemas inside `type`
  apply in place, which the loop check does not follow.
- Regular expressions (`pattern`) are matched by RE2, whose time is linear in
  the text: with Python's backtracking `re`, `^(a+)+$` against a long input
  would hold the event loop for hours. A pattern RE2 cannot run (a
  back-reference, a look-around) is refused at publish. `patternProperties`
  is refused too: jsonschema matches its keys with `re` in several keywords;
  `propertyNames: {pattern: ...}` says the same for the names of properties.
"""

from __future__ import annotations

import contextvars
import functools
import itertools
import json
import urllib.parse
from collections.abc import Iterator, Mapping
from typing import Any

import jsonschema
import jsonschema.protocols
import jsonschema.validators
import re2
import referencing
import referencing.exceptions

from waypost.model.definitions.format import (
    Limits,
    Problem,
    join_all,
    nesting_problem,
    unstorable_problem,
)

__all__ = ["input_errors", "input_schema_problems", "input_validator", "validate_input"]

MAX_LISTED = 50
"""How many problems with a run's input an InputError lists at most."""
MAX_INPUT_CHECKS = Limits().max_input_checks
"""How many keywords checking one input may apply by default (each keyword on each value)."""
_REFERENCES = ("$ref", "$dynamicRef", "$recursiveRef")
_ANCHORS = ("$anchor", "$dynamicAnchor")
# Keywords whose subschemas apply to the instance itself (not to a part of it).
_IN_PLACE_ONE = ("not", "if", "then", "else")
_IN_PLACE_LIST = ("allOf", "anyOf", "oneOf")
_IN_PLACE_MAP = ("dependentSchemas", "dependencies")
# Keywords holding name -> schema (the object itself is not a schema).
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", *_IN_PLACE_MAP)
# Keywords holding values, never schemas.
_VALUES = ("enum", "const", "examples", "default", "required", "type", "$comment")


def _re2_options() -> Any:
    options = re2.Options()
    options.log_errors = False  # a refused pattern is a problem we report, not a log line
    options.never_capture = True
    return options


_RE2_OPTIONS = _re2_options()


@functools.lru_cache(maxsize=256)
def _compiled(pattern: str) -> Any:
    return re2.compile(pattern, _RE2_OPTIONS)


def _pattern_refused(pattern: str) -> str | None:
    """Why RE2 cannot run `pattern`, if it cannot."""
    try:
        _compiled(pattern)
    except re2.error as exc:
        said = exc.args[0] if exc.args else ""
        detail = said.decode("utf-8", "replace") if isinstance(said, bytes) else str(said)
        return (
            f"this pattern cannot be matched in time linear in the input ({detail}); "
            "back-references and look-arounds are not supported"
        )
    return None


def _pattern(
    validator: Any, pattern: Any, instance: Any, schema: Any
) -> Iterator[jsonschema.ValidationError]:
    """The `pattern` keyword, matched by RE2."""
    if not (validator.is_type(instance, "string") and isinstance(pattern, str)):
        return
    try:
        found = _compiled(pattern).search(instance)
    except re2.error:
        found = None  # only a version published before patterns were checked gets here
    if found is None:
        yield jsonschema.ValidationError(f"{instance[:80]!r} does not match {pattern!r}")


def _same(value: Any) -> Any:
    """`value` with integral numbers as integers: equal JSON values give equal JSON text."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [_same(item) for item in value]
    if isinstance(value, dict):
        return {key: _same(item) for key, item in value.items()}
    return value


def _unique_items(
    validator: Any, unique: Any, instance: Any, schema: Any
) -> Iterator[jsonschema.ValidationError]:
    """`uniqueItems` in linear time (jsonschema compares objects pair by pair)."""
    if not (unique and validator.is_type(instance, "array")):
        return
    seen: set[str] = set()
    for item in instance:
        key = json.dumps(_same(item), sort_keys=True, separators=(",", ":"))
        if key in seen:
            yield jsonschema.ValidationError(f"has non-unique elements ({key[:80]} twice)")
            return
        seen.add(key)


class _TooMuchWork(Exception):
    """Checking one input applied more keywords than it may."""


# [keywords applied so far, most allowed] for the check running in this context.
_WORK: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar(
    "waypost_input_checks", default=None
)


def _counted(keyword: Any) -> Any:
    """`keyword`, counting each time a schema applies it to a value."""

    def counted(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        work = _WORK.get()
        if work is not None:
            work[0] += 1
            if work[0] > work[1]:
                raise _TooMuchWork
        return keyword(validator, value, instance, schema)

    return counted


@functools.cache
def _with_re2(cls: type[jsonschema.protocols.Validator]) -> type[jsonschema.protocols.Validator]:
    keywords = {**cls.VALIDATORS, "pattern": _pattern, "uniqueItems": _unique_items}
    counted = {name: _counted(keyword) for name, keyword in keywords.items()}
    extended: type[jsonschema.protocols.Validator] = jsonschema.validators.extend(  # type: ignore[no-untyped-call]
        cls, counted
    )
    return extended


def input_validator(schema: Mapping[str, Any] | bool) -> jsonschema.protocols.Validator:
    """A validator for `schema` that matches patterns with RE2 and retrieves nothing remote."""
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    validator: jsonschema.protocols.Validator = _with_re2(cls)(
        schema, registry=referencing.Registry()
    )
    return validator


def input_errors(
    schema: Mapping[str, Any] | bool, value: Any, most: int, checks: int = MAX_INPUT_CHECKS
) -> tuple[list[jsonschema.ValidationError], str | None]:
    """Up to `most` errors of `value` under `schema`, and why the check stopped short, if it did.

    The check applies at most `checks` keywords: a schema that applies
    subschemas in place many times over (`allOf` of references to `allOf`s of
    references...) would otherwise take exponential time.
    """
    token = _WORK.set([0, checks])
    try:
        return list(itertools.islice(input_validator(schema).iter_errors(value), most)), None
    except _TooMuchWork:
        return [], (
            f"checking it against the input schema takes more than {checks} steps "
            "(max_input_checks): the input is too large or the schema too intricate"
        )
    except (referencing.exceptions.Unresolvable, RecursionError) as exc:
        # Only a version published before references were checked can get here.
        return [], f"the input schema cannot be checked ({type(exc).__name__})"
    finally:
        _WORK.reset(token)


def validate_input(
    schema: Mapping[str, Any] | bool, value: Any, base: str, checks: int = MAX_INPUT_CHECKS
) -> list[Problem]:
    """What is wrong with `value` under `schema`, each problem located under `base`."""
    first = nesting_problem(value, base) or unstorable_problem(value, base)
    if first is not None:
        return [first]
    if schema is True:  # no schema: any value (a definition without `input_schema`)
        return []
    found, stopped = input_errors(schema, value, MAX_LISTED + 1, checks)
    if stopped is not None:
        return [Problem(base, stopped)]
    errors = sorted(found[:MAX_LISTED], key=lambda e: [str(p) for p in e.path])
    problems = [
        Problem(join_all([base, *error.absolute_path]), _shortened(error.message))
        for error in errors
    ]
    if len(found) > MAX_LISTED:
        problems.append(Problem(base, f"and more: only the first {MAX_LISTED} are listed"))
    return problems


def _shortened(message: str) -> str:
    # jsonschema quotes the whole offending value; a message names it, it need not hold it.
    return message if len(message) <= 300 else message[:299] + "…"


def _subschemas(node: Mapping[str, Any]) -> Iterator[tuple[str, Any, bool]]:
    """(keyword, value, applies in place) for the keywords of a schema object that hold schemas."""
    for key, value in node.items():
        if key in _VALUES:
            continue
        in_place = key in _IN_PLACE_ONE or key in _IN_PLACE_LIST or key in _IN_PLACE_MAP
        yield key, value, in_place


def _pointer(path: list[str | int]) -> str:
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path)


def input_schema_problems(schema: Any, base: str = "input") -> list[Problem]:
    """What an input schema may not do: references that leave it, point nowhere or loop in
    place, `$id` below the top, patterns RE2 cannot run, `patternProperties`."""
    if not isinstance(schema, Mapping):
        return []
    problems: list[Problem] = []
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    if cls is jsonschema.Draft3Validator:
        problems.append(
            Problem(
                join_all([base, "$schema"]), "draft 3 schemas are not supported: use a newer draft"
            )
        )
    nodes: dict[str, tuple[list[str | int], Mapping[str, Any]]] = {}
    anchors: dict[str, str] = {}
    # Every schema object by JSON pointer, without recursion.
    todo: list[tuple[list[str | int], Any]] = [([], schema)]
    while todo:
        path, node = todo.pop()
        if isinstance(node, list):
            todo.extend(([*path, index], value) for index, value in enumerate(node))
        if not isinstance(node, Mapping):
            continue
        nodes[_pointer(path)] = (path, node)
        for name in _ANCHORS:
            if isinstance(node.get(name), str):
                anchors[node[name]] = _pointer(path)
        if path and "$id" in node:
            problems.append(
                Problem(join_all([base, *path, "$id"]), "$id is allowed only at the top")
            )
        if isinstance(node.get("pattern"), str):
            refused = _pattern_refused(node["pattern"])
            if refused is not None:
                problems.append(Problem(join_all([base, *path, "pattern"]), refused))
        if "patternProperties" in node:
            problems.append(
                Problem(
                    join_all([base, *path, "patternProperties"]),
                    "patternProperties is not supported in an input schema (its patterns "
                    "would be matched by a backtracking engine); use propertyNames with a "
                    "pattern, or list the properties",
                )
            )
        for key, value, _ in _subschemas(node):
            if key in _SCHEMA_MAPS and isinstance(value, Mapping):
                todo.extend(([*path, key, name], child) for name, child in value.items())
            else:
                todo.append(([*path, key], value))
    # Edges between schema objects that apply to the same instance.
    edges: dict[str, list[tuple[str, list[str | int]]]] = {pointer: [] for pointer in nodes}
    for pointer, (path, node) in nodes.items():
        for name in _REFERENCES:
            if name not in node:
                continue
            where = [*path, name]
            target = _resolve(node[name], nodes, anchors)
            if isinstance(target, Problem):
                problems.append(Problem(join_all([base, *where]), target.message))
            else:
                edges[pointer].append((target, where))
        for key, value, in_place in _subschemas(node):
            if not in_place:
                continue
            children: list[tuple[str | int, Any]] = []
            if isinstance(value, list):
                children = list(enumerate(value))
            elif isinstance(value, Mapping) and key in _IN_PLACE_MAP:
                children = list(value.items())
            else:
                children = [("", value)]
            for part, child in children:
                child_path = [*path, key] if part == "" else [*path, key, part]
                if isinstance(child, Mapping):
                    edges[pointer].append((_pointer(child_path), child_path))
    problems.extend(_loops(edges, base))
    return problems


def _resolve(
    reference: Any,
    nodes: Mapping[str, tuple[list[str | int], Mapping[str, Any]]],
    anchors: Mapping[str, str],
) -> str | Problem:
    """The pointer of the schema object `reference` names, or why it names none."""
    if not isinstance(reference, str) or not reference.startswith("#"):
        return Problem(
            "",
            f"only references within the schema (starting with '#') are allowed, "
            f"not {str(reference)[:60]!r}",
        )
    fragment = urllib.parse.unquote(reference[1:])
    if fragment == "" or fragment.startswith("/"):
        if fragment in nodes:
            return fragment
        return Problem("", f"{reference[:60]!r} points at no schema in the input schema")
    if fragment in anchors:
        return anchors[fragment]
    return Problem("", f"no anchor {fragment[:60]!r} in the input schema")


def _loops(edges: Mapping[str, list[tuple[str, list[str | int]]]], base: str) -> list[Problem]:
    """A problem at the reference that closes each loop applying to the same instance."""
    problems: list[Problem] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for root in edges:
        if state.get(root):
            continue
        stack: list[tuple[str, Iterator[tuple[str, list[str | int]]]]] = [(root, iter(edges[root]))]
        state[root] = 1
        while stack:
            pointer, successors = stack[-1]
            for target, where in successors:
                if state.get(target) == 1:
                    problems.append(
                        Problem(
                            join_all([base, *where]),
                            "this leads back to where it started without going into the "
                            "input: validating would never end",
                        )
                    )
                elif not state.get(target):
                    state[target] = 1
                    stack.append((target, iter(edges[target])))
                    break
            else:
                state[pointer] = 2
                stack.pop()
    return problems
