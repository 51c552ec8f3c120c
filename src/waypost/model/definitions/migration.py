"""Whether a run waiting at a step of one version can continue on another version.

An operator moves a run that waits at a top-level `approval` or `wait` step to
a step of another version of its definition (by default the step with the same
id). The run enters that step afresh with its data unchanged, so the check
asks what the new version will read that the run cannot give it.

Decisions:

- A read is a path of fields from the top of the run's data that an
  expression names (`read_paths`: `order.customer.name` reads `order`,
  `order.customer` and `order.customer.name`), as far as the expression
  follows fields; past an index, a projection or a function it reads a
  computed value, which the check cannot follow.
- A path is there when the run's data has it (every field on the way, the
  last one possibly null), or when the new version's input schema declares
  it, field by field through `properties` (an optional input reads as null,
  as it would for a run started on the new version). For steps after the one
  the run continues at, a path is also there when a step reachable from that
  one stores at it, above it (the stored value's shape is that step's
  business) or below it. Whether that step runs first is not decided: the
  check catches a path nothing could provide, not every order of events.
- Every reason is reported, not just the first, each naming the steps it is
  about, as the operator reads them to fix the mapping or the new version.
"""

from __future__ import annotations

import difflib
import functools
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import jmespath

from waypost.model.definitions.expressions import (
    compile_expression,
    parse_output_path,
)
from waypost.model.definitions.format import (
    TARGET_FIELDS,
    Definition,
    inner_scopes,
    join_path,
    nesting_problem,
)
from waypost.model.definitions.inputs import input_errors
from waypost.model.definitions.validate import step_writes

__all__ = [
    "MigrationCheck",
    "call_step_reason",
    "check_mapping",
    "check_migration",
    "read_paths",
    "root_fields",
    "step_reads",
]

# Step types a run can wait at, and so be moved from.
WAITING_TYPES = ("approval", "wait")
# Input schema errors listed in a reason; the rest are counted.
_MAX_SCHEMA_ERRORS = 3
_MAX_SCHEMA_MESSAGE = 200

# Projections evaluate their right side (and a filter its condition) once per
# element, so only their left side reads the context they are evaluated in.
_PROJECTIONS = frozenset({"projection", "value_projection", "filter_projection", "flatten"})
# Nodes whose value is the context itself: a path continuing from one of them
# (`@.a`, `@ | a`) still reads the same context.
_CONTEXT_NODES = frozenset({"current", "identity"})
_READS_NOTHING = frozenset(
    {"literal", "raw_string", "current", "identity", "expref", "index", "slice"}
)


@dataclass(frozen=True)
class MigrationCheck:
    """Whether a run waiting at `from_step` can continue at `to_step` of the new version.

    `to_step` is the step the mapping names (the same id by default); None when
    the mapping names none and the new version has no top-level step of that id.
    """

    from_step: str
    to_step: str | None
    compatible: bool
    reasons: list[str]
    """Why the run cannot be moved (empty when compatible)."""
    notes: list[str]
    """What moving the run does besides changing its version."""


def root_fields(expression: str) -> frozenset[str]:
    """The top-level fields of a run's data that `expression` reads.

    Only fields read in the context the expression is evaluated in count: in
    `items[?price > limit].name` the filter and `name` apply to each item, so
    the only top-level read is `items`. Raises `ExpressionError` for invalid text.
    """
    return _root_fields(expression)


@functools.lru_cache(maxsize=1024)
def _root_fields(expression: str) -> frozenset[str]:
    compile_expression(expression)  # a readable ExpressionError for invalid text
    found: set[str] = set()
    _collect_reads(jmespath.compile(expression).parsed, found)
    return frozenset(found)


def read_paths(expression: str) -> frozenset[tuple[str, ...]]:
    """The paths of fields from the top of a run's data that `expression` reads.

    `order.customer.name` reads `("order",)`, `("order", "customer")` and
    `("order", "customer", "name")`; `items[?price > limit].name` reads only
    `("items",)` (the rest applies to each item). Raises `ExpressionError` for
    invalid text.
    """
    return _read_paths(expression)


@functools.lru_cache(maxsize=1024)
def _read_paths(expression: str) -> frozenset[tuple[str, ...]]:
    compile_expression(expression)  # a readable ExpressionError for invalid text
    reads, _ = _paths_read(jmespath.compile(expression).parsed)
    return frozenset(reads)


def _paths_read(node: Mapping[str, Any]) -> tuple[set[tuple[str, ...]], tuple[str, ...] | None]:
    """(paths of the context `node` reads, the path its value is at, if it is one)."""
    kind = node.get("type")
    children = [child for child in node.get("children", ()) if isinstance(child, Mapping)]
    if kind == "field":
        return {(node["value"],)}, (node["value"],)
    if kind in _CONTEXT_NODES:
        return set(), ()
    if kind in _READS_NOTHING:
        return set(), None
    reads: set[tuple[str, ...]] = set()
    if kind in ("subexpression", "pipe"):
        # Each part is evaluated on the value of the one before, the first on the context.
        at: tuple[str, ...] | None = ()
        for child in children:
            if at is None:
                break  # a computed value: nothing more of the context is read
            inner, value = _paths_read(child)
            reads.update(at + path for path in inner)
            at = at + value if value is not None else None
        return reads, at
    if kind == "index_expression" or kind in _PROJECTIONS:
        # Only the left side is evaluated in the context.
        if children:
            reads, _ = _paths_read(children[0])
        return reads, None
    # Comparisons, boolean operators, function arguments, multi-selects and any
    # node type unknown here keep the context (erring towards refusing a move).
    for child in children:
        reads.update(_paths_read(child)[0])
    return reads, None


def _collect_reads(node: Mapping[str, Any], found: set[str]) -> None:
    """Add to `found` the fields of the context `node` is evaluated in that it reads."""
    kind = node.get("type")
    children = [child for child in node.get("children", ()) if isinstance(child, Mapping)]
    if kind == "field":
        found.add(node["value"])
    elif kind in _READS_NOTHING:
        return
    elif kind in ("subexpression", "pipe", "index_expression"):
        # The left side is evaluated in the context; the rest on its value.
        if children:
            _collect_reads(children[0], found)
            if kind != "index_expression" and children[0].get("type") in _CONTEXT_NODES:
                for child in children[1:]:
                    _collect_reads(child, found)
    elif kind in _PROJECTIONS:
        if children:
            _collect_reads(children[0], found)
    else:
        # Comparisons, boolean operators, function arguments, multi-selects and
        # any node type unknown here keep the context; counting an unknown
        # node's reads errs towards refusing a migration, not towards a run
        # reading null.
        for child in children:
            _collect_reads(child, found)


def step_reads(step: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(location within the step, expression text) for every expression of a canonical step.

    These are the values of its `input` and HTTP `body` mappings (literals
    excepted), the `when` of each choice, a wait's `until`, a succeed step's
    `output`, a wait's `correlate.value`, the input of its compensation, a map's
    `items` and the values a pass step sets; a location reads like `input.amount`,
    `http.body.reference` or `choices[0].when`. A `result` reads the step's raw
    result, not the run's data.
    """
    kind = step.get("type")
    reads = list(_mapping_reads(step.get("input"), "input"))
    http = step.get("http")
    if isinstance(http, Mapping):
        reads.extend(_mapping_reads(http.get("body"), "http.body"))
    choices = step.get("choices")
    if isinstance(choices, list):
        for index, choice in enumerate(choices):
            if isinstance(choice, Mapping) and isinstance(choice.get("when"), str):
                reads.append((f"choices[{index}].when", choice["when"]))
    if kind == "wait" and isinstance(step.get("until"), str):
        reads.append(("until", step["until"]))
    correlate = step.get("correlate")
    value = correlate.get("value") if isinstance(correlate, Mapping) else None
    if kind == "wait" and isinstance(value, str):
        reads.append(("correlate.value", value))
    # Other steps' `output` is a location to store at, not an expression.
    if kind == "succeed" and isinstance(step.get("output"), str):
        reads.append(("output", step["output"]))
    compensate = step.get("compensate")
    if isinstance(compensate, Mapping):
        reads.extend(_mapping_reads(compensate.get("input"), "compensate.input"))
    if kind == "map" and isinstance(step.get("items"), str):
        reads.append(("items", step["items"]))
    if kind == "pass":
        reads.extend(_mapping_reads(step.get("set"), "set"))
    return reads


def _mapping_reads(mapping: Any, location: str) -> Iterable[tuple[str, str]]:
    if isinstance(mapping, Mapping):
        for name, value in mapping.items():
            # A literal is the object {"literal": X}; only strings are expressions.
            if isinstance(value, str):
                yield join_path(location, name), value


def check_mapping(source: Definition, target: Definition, mapping: Mapping[str, str]) -> list[str]:
    """What is wrong with a mapping old step id -> new step id, whatever the run.

    A key must be a step of `source`, a value a top-level step of `target`
    (a run cannot be moved into a parallel branch). Empty when it is fine.
    """
    problems: list[str] = []
    for old, new in mapping.items():
        if old not in source.all_steps:
            problems.append(
                f"the mapping names step {old!r}, which the old version does not have"
                f"{_did_you_mean(old, source.all_steps)}"
            )
        problem = _target_problem(target, old, new)
        if problem is not None:
            problems.append(problem)
    return problems


def _target_problem(target: Definition, old: str, new: Any) -> str | None:
    """What is wrong with mapping step `old` to `new` of the target, if anything."""
    if not isinstance(new, str):
        return f"the mapping sends step {old!r} to {new!r}, which is not a step id"
    if new not in target.all_steps:
        return (
            f"the mapping sends step {old!r} to {new!r}, which the new version does not have"
            f"{_did_you_mean(new, target.steps)}"
        )
    parent = target.parents.get(new)
    if parent is not None:
        return (
            f"the mapping sends step {old!r} to {new!r}, which is inside "
            f"{_scope_of(target, parent)} of the new version; a run can only be moved to a "
            "top-level step"
        )
    return None


def _scope_of(definition: Definition, parent: str) -> str:
    """How a message names the step whose branches (or iterator) hold a step."""
    kind = definition.all_steps[parent].get("type")
    return f"{kind} step {parent!r}"


def _did_you_mean(name: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def check_migration(
    source: Definition,
    target: Definition,
    *,
    at: str,
    data: Mapping[str, Any],
    run_input: Any,
    mapping: Mapping[str, str],
    votes: int = 0,
) -> MigrationCheck:
    """Whether a run waiting at top-level step `at` of `source` can continue on `target`.

    `data` is the run's data now, `run_input` the input it was started with,
    `mapping` old step id -> new step id (a step missing from it goes to the
    step of the same id), `votes` how many approvers already decided on the
    pending approval at `at`.
    """
    reasons = _source_reasons(source, at)
    to_step, target_reason = _resolve_target(target, at, mapping)
    if target_reason is not None:
        reasons.append(target_reason)
    reasons.extend(_input_reasons(target, run_input))
    if to_step is not None and target_reason is None:
        reasons.extend(_data_reasons(target, to_step, data))
    notes = _notes(source, target, at, to_step if target_reason is None else None, votes)
    return MigrationCheck(
        from_step=at,
        to_step=to_step,
        compatible=not reasons,
        reasons=reasons,
        notes=notes,
    )


def _source_reasons(source: Definition, at: str) -> list[str]:
    if at not in source.all_steps:
        return [f"the old version has no step {at!r}{_did_you_mean(at, source.steps)}"]
    parent = source.parents.get(at)
    if parent is not None:
        return [
            f"step {at!r} is inside {_scope_of(source, parent)} of the old version; only a run "
            "waiting at a top-level approval or wait step can be moved"
        ]
    kind = source.steps[at].get("type")
    if kind == "call":
        return [call_step_reason(at, [])]
    if kind not in WAITING_TYPES:
        return [
            "only a run waiting at an approval or wait step can be moved; "
            f"it is at {kind} step {at!r}"
        ]
    return []


def call_step_reason(at: str, waiting_for: Iterable[Mapping[str, Any]]) -> str:
    """Why a run waiting at call step `at` (for the child run `waiting_for` names) is
    not moved: the move enters the mapped step afresh, which for a call step starts the
    child again while the first one runs, and the first one's end would reach a step
    the run no longer waits at."""
    children = [str(w.get("run_id")) for w in waiting_for if w.get("kind") == "child"]
    child = f"its child run {children[0]!r}" if children else "its child run"
    return (
        f"the run waits at call step {at!r} for {child}: moving it would enter the step "
        "afresh on the new version and start the child again while this one runs (and "
        "this one's end would reach a step the run no longer waits at). Migrate it once "
        "the child has ended and the run waits at an approval or wait step"
    )


def _resolve_target(
    target: Definition, at: str, mapping: Mapping[str, str]
) -> tuple[str | None, str | None]:
    """The step the run continues at, and what is wrong with it, if anything."""
    if at in mapping:
        new: Any = mapping[at]
        return (new if isinstance(new, str) else None), _target_problem(target, at, new)
    if at in target.steps:
        return at, None
    parent = target.parents.get(at)
    if parent is not None:
        return None, (
            f"the new version has step {at!r} only inside {_scope_of(target, parent)}, and a run "
            f"can only be moved to a top-level step: map {at!r} to a top-level step of the "
            "new version"
        )
    return None, (
        f"the new version has no step {at!r}{_did_you_mean(at, target.steps)}: "
        f"map {at!r} to a step of the new version"
    )


def _input_reasons(target: Definition, run_input: Any) -> list[str]:
    schema = target.input_schema
    if schema is None:
        return []
    too_deep = nesting_problem(run_input, "$")
    if too_deep is not None:
        return [f"the run's input is {too_deep.message}"]
    errors, stopped = input_errors(schema, run_input, 1000)
    if stopped is not None:
        return [f"the run's input cannot be checked against the new version: {stopped}"]
    if not errors:
        return []
    listed = "; ".join(
        f"{_json_path(error.absolute_path)}: {_shorten(error.message)}"
        for error in errors[:_MAX_SCHEMA_ERRORS]
    )
    more = len(errors) - _MAX_SCHEMA_ERRORS
    rest = f" (and {more} more)" if more > 0 else ""
    return [f"the run's input does not satisfy the new version's input schema: {listed}{rest}"]


def _json_path(parts: Iterable[str | int]) -> str:
    path = "$"
    for part in parts:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part.isidentifier():
            path += f".{part}"
        else:
            path += f"[{json.dumps(part)}]"
    return path


def _shorten(message: str) -> str:
    if len(message) <= _MAX_SCHEMA_MESSAGE:
        return message
    return message[: _MAX_SCHEMA_MESSAGE - 1] + "…"


def _data_reasons(target: Definition, to_step: str, data: Mapping[str, Any]) -> list[str]:
    schema = target.input_schema
    reachable = _reachable(target, to_step)
    stored = [
        parse_output_path(location)
        for step_id in reachable
        for _, location in step_writes(target.all_steps[step_id])
    ]

    def present(path: tuple[str, ...], later: bool) -> bool:
        if _in_data(data, path) or _declared(schema, path):
            return True
        return later and any(
            path[: len(set_at)] == set_at or set_at[: len(path)] == path for set_at in stored
        )

    reasons: list[str] = []
    for step_id in reachable:
        later = step_id != to_step
        missing: dict[tuple[str, ...], list[str]] = {}
        for location, text in step_reads(target.all_steps[step_id]):
            for path in read_paths(text):
                if not present(path, later):
                    missing.setdefault(path, []).append(location)
        # Name the first level missing: `order.customer`, not also `order.customer.name`.
        for path in sorted(missing):
            if any(path[: len(other)] == other and other != path for other in missing):
                continue
            name = ".".join(path)
            where = ", ".join(missing[path])
            if not later:
                reasons.append(
                    f"step {step_id!r} of the new version, where the run continues, reads "
                    f"{name!r} ({where}), which the run's data does not have"
                )
            else:
                reasons.append(
                    f"step {step_id!r} of the new version reads {name!r} ({where}), which the "
                    f"run's data does not have and no step after {to_step!r} sets"
                )
    return reasons


def _in_data(data: Mapping[str, Any], path: tuple[str, ...]) -> bool:
    node: Any = data
    for name in path:
        if not isinstance(node, Mapping) or name not in node:
            return False
        node = node[name]
    return True


def _declared(schema: Mapping[str, Any] | bool | None, path: tuple[str, ...]) -> bool:
    """Whether the input schema declares `path`, field by field through `properties`."""
    node: Any = schema
    for name in path:
        properties = node.get("properties") if isinstance(node, Mapping) else None
        if not isinstance(properties, Mapping) or name not in properties:
            return False
        node = properties[name]
    return True


def _reachable(target: Definition, start: str) -> list[str]:
    """The steps a run at `start` can get to, `start` first, branch steps included."""
    order = [start]
    seen = {start}
    for step_id in order:  # grows while it is walked
        for successor in _successors(target.all_steps[step_id]):
            if successor in target.all_steps and successor not in seen:
                seen.add(successor)
                order.append(successor)
    return order


def _successors(step: Mapping[str, Any]) -> list[str]:
    found = [step[name] for name in TARGET_FIELDS if isinstance(step.get(name), str)]
    for choice in step.get("choices", ()):
        if isinstance(choice, Mapping) and isinstance(choice.get("next"), str):
            found.append(choice["next"])
    for rule in step.get("catch", ()):
        if isinstance(rule, Mapping) and isinstance(rule.get("next"), str):
            found.append(rule["next"])
    for _, scope in inner_scopes(step):
        if isinstance(scope, Mapping) and isinstance(scope.get("start"), str):
            found.append(scope["start"])
    return found


def _notes(
    source: Definition, target: Definition, at: str, to_step: str | None, votes: int
) -> list[str]:
    notes: list[str] = []
    old_kind = source.steps[at].get("type") if at in source.steps else None
    if old_kind == "approval":
        notes.append(
            f"the pending approval of step {at!r} is revoked: its credentials stop working"
        )
        if votes > 0:
            given = (
                "1 vote already given does not"
                if votes == 1
                else f"{votes} votes already given do not"
            )
            notes.append(f"{given} carry over")
    if source.on_cancel != target.on_cancel:
        notes.append(
            "if the run is cancelled, it compensates its completed steps first (the new version "
            "says on_cancel: compensate)"
            if target.on_cancel == "compensate"
            else "if the run is cancelled, it no longer compensates its completed steps (the new "
            "version does not say on_cancel: compensate)"
        )
    if to_step is None:
        return notes
    new = target.steps[to_step]
    new_kind = new.get("type")
    if new_kind == "approval":
        notes.append(
            f"a new approval of step {to_step!r} is requested from the new version's approvers"
        )
    elif new_kind == "wait":
        timeout = " (its timeout too)" if "timeout" in new else ""
        if "until" in new:
            notes.append(
                f"step {to_step!r} waits until the time its `until` gives on the run's data "
                f"as of the migration{timeout}"
            )
        else:
            notes.append(f"the wait of step {to_step!r} starts again from the migration{timeout}")
    if old_kind is not None and new_kind != old_kind:
        notes.append(
            f"the run moves from {old_kind} step {at!r} to {new_kind} step {to_step!r}, "
            "a step of another type"
        )
    return notes
