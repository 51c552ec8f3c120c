"""Validate a definition: the static checks, the canonical form and `parse_definition`.

Validation runs in three passes and reports every problem it finds, never
just the first: the text is read (YAML or JSON; a syntax error stops there, as
nothing further can be located), the structure is checked against the JSON
Schema (both in `reading`), and static checks follow the transitions between
steps. Each problem names its location as a dotted path
(`steps.approve.approvers.quorum`, `steps.split.branches[0].steps.ship.next`).
The static checks tolerate a structure the schema refused, and a location the
schema already faulted is not reported twice.

Decisions:

- Step ids are unique across the whole definition, branches included, so an
  event or a migration mapping can name a step by its id alone. A step goes
  only to steps of its own scope: the top level, its parallel branch or its
  map step's iterator. A catch rule's `next` is a transition like any other
  (reachability, loops).
- What a step writes into its walk's data (`step_writes`: its `output`, a
  pass step's `set` locations, its catch rules' error locations) is what the
  parallel overlap rule compares. A map's items write into their own data
  only; the map's `output` is its one write.
- Map steps count toward `max_depth` like parallel steps, and nest inside
  map steps' iterators at most `max_map_depth` deep; `max_items` and
  `concurrency` are bounded by the tenant's `max_map_items` and
  `max_map_concurrency`, which are also what a map without them allows.
- A loop must be bounded. It is when one of its steps is a `choice` with
  `max_iterations`, a `wait` for a `signal` with a `timeout` whose way out
  (`on_timeout`, or failing the run) leaves the loop, or an `approval` with
  `expires_in` whose way out (`on_expiry`, or failing the run) leaves it.
  So every turn either is counted or needs an outside event that, when it
  does not come, ends the loop. A loop must also wait on each turn (an
  activity, an approval or a wait on it): made only of choices it would turn
  without yielding, on the same data each time, until its bound.
- The canonical form is the validated structure with every duration in
  seconds (an integer when whole), a `compensate` given as a bare name
  spelled `{activity: name}`, and the editor hint `$schema` removed; the
  digest is the SHA-256 of its JSON with sorted keys and no whitespace.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Collection, Iterator, Mapping
from types import MappingProxyType
from typing import Any

import jsonschema
import jsonschema.validators

from waypost.errors import InvalidRequest
from waypost.model.definitions.expressions import (
    ExpressionError,
    compile_expression,
    parse_output_path,
)
from waypost.model.definitions.format import (
    DURATION_FIELDS,
    RETRY_DURATION_FIELDS,
    TARGET_FIELDS,
    Definition,
    DefinitionError,
    Limits,
    Problem,
    canonical_digest,
    canonical_json,
    describe_duration,
    inner_scopes,
    join_all,
    join_path,
    json_type_name,
    parse_duration,
)
from waypost.model.definitions.inputs import input_schema_problems, validate_input
from waypost.model.definitions.reading import json_problems, read_source, schema_problems
from waypost.model.identity import check_id

__all__ = ["DEFAULT_ERROR_OUTPUT", "input_problems", "parse_definition", "step_writes"]

# Beyond this many steps in one scope the definition is refused on count alone,
# and the graph checks are skipped rather than run on a pathological input.
_GRAPH_CHECK_MAX_STEPS = 1000
_LOCATION = re.compile(r"^\$(\.[A-Za-z_][A-Za-z0-9_]*)+$")
DEFAULT_ERROR_OUTPUT = "$.error"
"""Where a catch rule stores the error it caught, when it names no `output`."""
# What a definition may contain when the caller names no tenant's limits.
_DEFAULT_LIMITS = Limits()
# No limit a published version could have been allowed past.
_PUBLISHED = Limits(
    max_steps=2**31,
    max_depth=2**31,
    max_parallel_width=2**31,
    max_map_depth=2**31,
    max_map_items=2**31,
    max_map_concurrency=2**31,
    max_total_timeout=float(2**62),
    max_definition_bytes=2**62,
)


def _seconds(value: float) -> int | float:
    return int(value) if value.is_integer() else value


# Static checks ---------------------------------------------------------------


def _targets(step: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """(field, step id) for every transition out of `step`."""
    found = [(name, step[name]) for name in TARGET_FIELDS if name in step]
    choices = step.get("choices")
    if isinstance(choices, list):
        for index, choice in enumerate(choices):
            if isinstance(choice, Mapping) and "next" in choice:
                found.append((f"choices[{index}].next", choice["next"]))
    catch = step.get("catch")
    if isinstance(catch, list):
        for index, rule in enumerate(catch):
            if isinstance(rule, Mapping) and "next" in rule:
                found.append((f"catch[{index}].next", rule["next"]))
    return found


def _bounds_loop(step: Mapping[str, Any], loop: set[str]) -> bool:
    """Whether `step`, on a loop through the steps in `loop`, bounds that loop."""
    kind = step.get("type")
    if kind == "choice":
        return "max_iterations" in step
    if kind == "wait":
        return "signal" in step and "timeout" in step and step.get("on_timeout") not in loop
    if kind == "approval":
        return "expires_in" in step and step.get("on_expiry") not in loop
    return False


def _waits(step: Any) -> bool:
    """Whether `step` waits for something outside the interpreter, or a branch of it does.

    Between two such steps the interpreter runs without pause; a loop without one
    would turn without yielding, and with the same data each turn.
    """
    if not isinstance(step, Mapping):
        return False
    if step.get("type") in ("activity", "approval", "wait", "call"):
        return True
    for _, scope in inner_scopes(step):
        inner = scope.get("steps") if isinstance(scope, Mapping) else None
        if isinstance(inner, Mapping) and any(_waits(s) for s in inner.values()):
            return True
    return False


def _loops(graph: Mapping[str, list[str]]) -> list[list[str]]:
    """The strongly connected components of `graph` that contain a cycle, in input order."""
    reach: dict[str, set[str]] = {}
    for node in graph:
        seen: set[str] = set()
        todo = list(graph[node])
        while todo:
            current = todo.pop()
            if current not in seen:
                seen.add(current)
                todo.extend(graph[current])
        reach[node] = seen
    loops: list[list[str]] = []
    placed: set[str] = set()
    for node in graph:
        if node in placed or node not in reach[node]:
            continue
        component = [other for other in graph if other in reach[node] and node in reach[other]]
        placed.update(component)
        loops.append(component)
    return loops


def step_writes(step: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """(location within the step, output location) of every place a step stores into its
    walk's data: its `output`, the locations a pass step `set`s, where its catch rules put
    the error. A map's items store into their own data, which the run never sees: only
    the map's `output` counts."""
    output = step.get("output")
    if step.get("type") != "succeed" and isinstance(output, str):
        yield "output", output
    assigned = step.get("set")
    if step.get("type") == "pass" and isinstance(assigned, Mapping):
        for location in assigned:
            yield join_path("set", location), location
    catch = step.get("catch")
    if isinstance(catch, list):
        for index, rule in enumerate(catch):
            if isinstance(rule, Mapping):
                where = rule.get("output", DEFAULT_ERROR_OUTPUT)
                if isinstance(where, str):
                    yield f"catch[{index}].output", where


def _outputs(steps: Any, prefix: str) -> Iterator[tuple[tuple[str, ...], str, str]]:
    """(path, location, text) of every output location in `steps`, nested branches included."""
    if not isinstance(steps, Mapping):
        return
    for step_id, step in steps.items():
        if not isinstance(step, Mapping):
            continue
        for within, output in step_writes(step):
            # A malformed location is the schema's to report.
            if _LOCATION.match(output):
                yield parse_output_path(output), f"{prefix}steps.{step_id}.{within}", output
        branches = step.get("branches")
        if isinstance(branches, list):
            for index, branch in enumerate(branches):
                if isinstance(branch, Mapping):
                    inner = f"{prefix}steps.{step_id}.branches[{index}]."
                    yield from _outputs(branch.get("steps"), inner)


class _Checker:
    def __init__(
        self,
        limits: Limits,
        known_activities: Collection[str] | None,
        faulted: set[str],
        rules: bool = True,
    ) -> None:
        self.rules = rules
        """Whether to apply the rules a new version must follow (not a published one)."""
        self.limits = limits
        self.known = None if known_activities is None else sorted(set(known_activities))
        self.faulted = faulted
        self.problems: list[Problem] = []
        self.step_count = 0
        self.where: dict[str, str] = {}  # step id -> path where it is defined
        self.durations: list[tuple[str, float]] = []
        self.compensations = 0  # steps that say how to undo them
        self.map_depth = 0  # map steps around the scope being checked

    def add(self, path: str, message: str) -> None:
        if path not in self.faulted:
            self.faulted.add(path)
            self.problems.append(Problem(path, message))

    def check(self, data: Mapping[str, Any]) -> list[Problem]:
        self.collect_ids(data.get("steps"), "")
        self.scope(data.get("steps"), data.get("start"), "", 0)
        if self.step_count > self.limits.max_steps:
            self.add("steps", f"at most {self.limits.max_steps} steps (found {self.step_count})")
        self.check_input_schema(data.get("input"))
        self.check_total_timeout(data.get("timeout"))
        if self.rules and data.get("on_cancel") == "compensate" and not self.compensations:
            self.add(
                "on_cancel",
                "'compensate' needs a step that has a `compensate` activity; no step has one",
            )
        return self.problems

    def collect_ids(self, steps: Any, prefix: str) -> None:
        if not isinstance(steps, Mapping):
            return
        # A whole scope first, then its branches: a clash is reported at the inner step.
        for step_id in steps:
            path = f"{prefix}steps.{step_id}"
            if step_id in self.where:
                self.add(path, f"step id {step_id!r} is used twice (also at {self.where[step_id]})")
            else:
                self.where[step_id] = path
        for step_id, step in steps.items():
            path = f"{prefix}steps.{step_id}"
            for within, scope in inner_scopes(step) if isinstance(step, Mapping) else ():
                if isinstance(scope, Mapping):
                    self.collect_ids(scope.get("steps"), f"{path}.{within}.")

    def unknown_target(self, target: str, steps: Mapping[str, Any]) -> str:
        if target in self.where:
            return (
                f"step {target!r} is in another scope (at {self.where[target]}): "
                "a step can only go to steps of its own branch, iterator or level"
            )
        names = [name for name in steps if isinstance(name, str)]
        close = difflib.get_close_matches(target, names, n=1)
        return f"no step {target!r}" + (f" (did you mean {close[0]!r}?)" if close else "")

    def scope(self, steps: Any, start: Any, prefix: str, depth: int) -> None:
        if not isinstance(steps, Mapping):
            return
        if isinstance(start, str) and start not in steps:
            self.add(f"{prefix}start", self.unknown_target(start, steps))
        graph: dict[str, list[str]] = {step_id: [] for step_id in steps}
        for step_id, step in steps.items():
            self.step_count += 1
            if not isinstance(step, Mapping):
                continue
            path = f"{prefix}steps.{step_id}"
            for name, target in _targets(step):
                if not isinstance(target, str):
                    continue
                if target in steps:
                    graph[step_id].append(target)
                else:
                    self.add(f"{path}.{name}", self.unknown_target(target, steps))
            self.step(step, path, depth)
        if len(graph) > _GRAPH_CHECK_MAX_STEPS:
            return
        if isinstance(start, str) and start in graph:
            self.check_reachable(graph, start, prefix)
        for loop in _loops(graph):
            members = set(loop)
            if not any(_bounds_loop(steps[step_id], members) for step_id in loop):
                names = ", ".join(loop)
                self.add(
                    f"{prefix}steps.{loop[0]}",
                    f"loop through {names} has no bound: give a choice on it max_iterations, "
                    "or wait on it for a signal (or an approval) with a timeout that leads out",
                )
            elif self.rules and not any(_waits(steps[step_id]) for step_id in loop):
                self.add(
                    f"{prefix}steps.{loop[0]}",
                    f"loop through {', '.join(loop)} never waits for anything (an activity, "
                    "an approval or a wait): the data cannot change between its turns, so it "
                    "would only spin the engine until its bound; put such a step on it",
                )

    def check_reachable(self, graph: Mapping[str, list[str]], start: str, prefix: str) -> None:
        seen = {start}
        todo = [start]
        while todo:
            for target in graph[todo.pop()]:
                if target not in seen:
                    seen.add(target)
                    todo.append(target)
        for step_id in graph:
            if step_id not in seen:
                self.add(f"{prefix}steps.{step_id}", f"unreachable from the start step {start!r}")

    def step(self, step: Mapping[str, Any], path: str, depth: int) -> None:
        for name in DURATION_FIELDS:
            if name in step:
                self.duration(step[name], f"{path}.{name}")
        retry = step.get("retry")
        if isinstance(retry, Mapping):
            for name in RETRY_DURATION_FIELDS:
                if name in retry:
                    self.duration(retry[name], f"{path}.retry.{name}")
        kind = step.get("type")
        if kind == "activity":
            self.activity(step, path)
        elif kind == "approval":
            self.approvers(step.get("approvers"), f"{path}.approvers")
            self.mapping(step.get("input"), f"{path}.input")
        elif kind == "wait":
            self.expression(step.get("until"), f"{path}.until")
            correlate = step.get("correlate")
            if isinstance(correlate, Mapping):
                self.expression(correlate.get("value"), f"{path}.correlate.value")
        elif kind == "choice":
            choices = step.get("choices")
            for index, choice in enumerate(choices if isinstance(choices, list) else []):
                if isinstance(choice, Mapping):
                    self.expression(choice.get("when"), f"{path}.choices[{index}].when")
        elif kind == "succeed":
            self.expression(step.get("output"), f"{path}.output")
        elif kind == "parallel":
            self.parallel(step, path, depth)
        elif kind == "map":
            self.map(step, path, depth)
        elif kind == "pass":
            self.mapping(step.get("set"), f"{path}.set")
        elif kind == "call":
            self.mapping(step.get("input"), f"{path}.input")
        self.result(step, path)
        self.catch(step.get("catch"), f"{path}.catch")

    def result(self, step: Mapping[str, Any], path: str) -> None:
        selected = step.get("result")
        if selected is None:
            return
        if isinstance(selected, Mapping):
            self.mapping(selected, f"{path}.result")
        else:
            self.expression(selected, f"{path}.result")
        if not self.rules:
            return
        if "output" not in step:
            self.add(f"{path}.result", "selects what is stored at `output`, but the step has none")
        elif step.get("type") == "wait" and "signal" not in step:
            self.add(f"{path}.result", "only a wait for a signal has a result (its payload)")

    def catch(self, rules: Any, path: str) -> None:
        if not isinstance(rules, list) or not self.rules:
            return
        for index, rule in enumerate(rules):
            names = rule.get("errors") if isinstance(rule, Mapping) else None
            if not isinstance(names, list):
                continue
            if "*" in names and len(names) > 1:
                self.add(f"{path}[{index}].errors", "'*' stands for every error: list it alone")
            elif names == ["*"] and index < len(rules) - 1:
                self.add(
                    f"{path}[{index + 1}]",
                    f"is never used: rule {index} catches every error ('*') before it",
                )

    def nested(self, path: str, depth: int) -> int:
        """The depth of a parallel or map step inside `depth` of them, checked."""
        depth += 1
        if depth > self.limits.max_depth:
            self.add(
                path,
                f"parallel and map steps nest at most {self.limits.max_depth} deep (found {depth})",
            )
        return depth

    def map(self, step: Mapping[str, Any], path: str, depth: int) -> None:
        depth = self.nested(path, depth)
        self.map_depth += 1
        if self.map_depth > self.limits.max_map_depth:
            self.add(
                path,
                f"map steps nest at most {self.limits.max_map_depth} deep inside map "
                f"steps' iterators (found {self.map_depth}): each level multiplies the items",
            )
        self.expression(step.get("items"), f"{path}.items")
        for name, ceiling, limit in (
            ("max_items", self.limits.max_map_items, "max_map_items"),
            ("concurrency", self.limits.max_map_concurrency, "max_map_concurrency"),
        ):
            value = step.get(name)
            if isinstance(value, int) and not isinstance(value, bool) and value > ceiling:
                self.add(
                    f"{path}.{name}", f"at most {ceiling} (the tenant's {limit}; found {value})"
                )
        tolerate, most = step.get("tolerate"), step.get("max_items")
        if (
            self.rules
            and isinstance(most, int)
            and most >= 0
            and isinstance(tolerate, int)
            and tolerate > most
        ):
            self.add(f"{path}.tolerate", f"{tolerate} is more than max_items ({most})")
        iterator = step.get("iterator")
        if isinstance(iterator, Mapping):
            self.scope(iterator.get("steps"), iterator.get("start"), f"{path}.iterator.", depth)
        self.map_depth -= 1

    def activity(self, step: Mapping[str, Any], path: str) -> None:
        self.activity_name(step.get("activity"), f"{path}.activity")
        self.mapping(step.get("input"), f"{path}.input")
        http = step.get("http")
        if isinstance(http, Mapping):
            self.mapping(http.get("body"), f"{path}.http.body")
        compensate = step.get("compensate")
        if compensate is not None:
            self.compensations += 1
        if isinstance(compensate, str):
            self.activity_name(compensate, f"{path}.compensate")
        elif isinstance(compensate, Mapping):
            self.activity_name(compensate.get("activity"), f"{path}.compensate.activity")
            self.mapping(compensate.get("input"), f"{path}.compensate.input")
        retry = step.get("retry")
        if isinstance(retry, Mapping):
            try:
                first = parse_duration(retry.get("initial_interval", 1))
                cap = parse_duration(retry.get("max_interval", 300))
            except ValueError:
                return
            if first > cap:
                self.add(f"{path}.retry.max_interval", "must not be shorter than initial_interval")

    def activity_name(self, name: Any, path: str) -> None:
        if self.known is None or not isinstance(name, str) or name in self.known:
            return
        close = difflib.get_close_matches(name, self.known, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        self.add(path, f"unknown activity {name!r}{hint}")

    def approvers(self, approvers: Any, path: str) -> None:
        if not isinstance(approvers, Mapping):
            return
        users: Any = approvers.get("users")
        quorum = approvers.get("quorum")
        for kind in ("users", "groups"):
            names = approvers.get(kind)
            for i, name in enumerate(names if isinstance(names, list) else []):
                if not isinstance(name, str):
                    continue
                try:
                    check_id(name, kind[:-1])
                except InvalidRequest:
                    self.add(f"{path}.{kind}[{i}]", "contains a control or invisible character")
        if approvers.get("all") is True:
            if quorum is not None:
                self.add(f"{path}.all", "cannot be combined with quorum")
            elif approvers.get("groups"):
                self.add(f"{path}.all", "needs users, not groups (a group's members change)")
        only_users = isinstance(users, list) and not approvers.get("groups")
        if only_users and isinstance(quorum, int) and quorum > len(users):
            self.add(f"{path}.quorum", f"{quorum} cannot be reached by {len(users)} listed users")

    def parallel(self, step: Mapping[str, Any], path: str, depth: int) -> None:
        depth = self.nested(path, depth)
        branches = step.get("branches")
        if not isinstance(branches, list):
            return
        if len(branches) > self.limits.max_parallel_width:
            self.add(
                f"{path}.branches",
                f"at most {self.limits.max_parallel_width} branches (found {len(branches)})",
            )
        for index, branch in enumerate(branches):
            if isinstance(branch, Mapping):
                prefix = f"{path}.branches[{index}]."
                self.scope(branch.get("steps"), branch.get("start"), prefix, depth)
        if self.rules:
            self.branch_writes(branches, path)

    def branch_writes(self, branches: list[Any], path: str) -> None:
        """Two branches of one parallel step may not write overlapping output locations."""
        earlier: list[tuple[int, tuple[str, ...], str]] = []
        for index, branch in enumerate(branches):
            steps = branch.get("steps") if isinstance(branch, Mapping) else None
            prefix = f"{path}.branches[{index}]."
            mine = list(_outputs(steps, prefix))
            for written, where, text in mine:
                clash = next(
                    (
                        (other, seen)
                        for other, seen, _ in earlier
                        if seen[: len(written)] == written or written[: len(seen)] == seen
                    ),
                    None,
                )
                if clash is not None:
                    self.add(
                        where,
                        f"branch {index} writes {text}, which overlaps what branch {clash[0]} "
                        f"writes ($.{'.'.join(clash[1])}): the branches of a parallel step "
                        "must write different fields",
                    )
            earlier.extend((index, written, where) for written, where, _ in mine)

    def mapping(self, mapping: Any, path: str) -> None:
        if isinstance(mapping, Mapping):
            for name, value in mapping.items():
                self.expression(value, join_path(path, name))

    def expression(self, text: Any, path: str) -> None:
        if not isinstance(text, str) or not self.rules:
            return
        try:
            compile_expression(text)
        except ExpressionError as exc:
            self.add(path, str(exc))

    def duration(self, value: Any, path: str) -> None:
        try:
            self.durations.append((path, parse_duration(value)))
        except ValueError as exc:
            self.add(path, str(exc))

    def check_total_timeout(self, value: Any) -> None:
        ceiling = self.limits.max_total_timeout
        if value is not None:
            try:
                total = parse_duration(value)
            except ValueError as exc:
                self.add("timeout", str(exc))
                return
            if total > ceiling:
                self.add(
                    "timeout",
                    f"at most {describe_duration(ceiling)} (found {describe_duration(total)})",
                )
            ceiling = min(total, ceiling)
        for path, seconds in self.durations:
            if seconds > ceiling:
                self.add(
                    path,
                    f"{describe_duration(seconds)} is longer than the total timeout of a run "
                    f"({describe_duration(ceiling)})",
                )

    def check_input_schema(self, schema: Any) -> None:
        if not isinstance(schema, Mapping):
            return
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        for error in cls(cls.META_SCHEMA).iter_errors(schema):
            self.add(join_all(["input", *error.absolute_path]), f"invalid schema: {error.message}")
        if self.rules:
            for problem in input_schema_problems(schema):
                self.add(problem.path, problem.message)


def input_problems(
    definition: Definition, value: Any, limits: Limits = _DEFAULT_LIMITS
) -> list[Problem]:
    """What is wrong with `value` as the input of a run of `definition` (located).

    Checking it applies at most `limits.max_input_checks` keywords of the schema.
    """
    if not isinstance(value, Mapping) and value is not None:
        found = json_type_name(value)
        return [Problem("input", f"the input of a definition run is an object, not {found}")]
    schema = True if definition.input_schema is None else definition.input_schema
    return validate_input(schema, value or {}, "input", limits.max_input_checks)


# Canonical form --------------------------------------------------------------


def _canonical_step(step: dict[str, Any]) -> dict[str, Any]:
    for name in DURATION_FIELDS:
        if name in step:
            step[name] = _seconds(parse_duration(step[name]))
    retry = step.get("retry")
    if retry is not None:
        for name in RETRY_DURATION_FIELDS:
            if name in retry:
                retry[name] = _seconds(parse_duration(retry[name]))
    if isinstance(step.get("compensate"), str):
        step["compensate"] = {"activity": step["compensate"]}
    for _, scope in inner_scopes(step):
        scope["steps"] = {key: _canonical_step(value) for key, value in scope["steps"].items()}
    return step


def _canonical(data: Mapping[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(canonical_json(data))
    result.pop("$schema", None)
    if "timeout" in result:
        result["timeout"] = _seconds(parse_duration(result["timeout"]))
    result["steps"] = {key: _canonical_step(value) for key, value in result["steps"].items()}
    return result


def _index_steps(
    steps: Mapping[str, Any],
    parent: str | None,
    all_steps: dict[str, Mapping[str, Any]],
    parents: dict[str, str | None],
) -> None:
    for step_id, step in steps.items():
        all_steps[step_id] = step
        parents[step_id] = parent
        for _, scope in inner_scopes(step):
            _index_steps(scope["steps"], step_id, all_steps, parents)


# Entry point -----------------------------------------------------------------


def parse_definition(
    source: str | bytes | Mapping[str, Any],
    *,
    limits: Limits = _DEFAULT_LIMITS,
    known_activities: Collection[str] | None = None,
    published: bool = False,
) -> Definition:
    """Read and validate a definition given as YAML or JSON text, or as a dict.

    Raises `DefinitionError` listing every problem found, each with its
    location. `known_activities`, when given, are the activity names a step
    may call; otherwise activity names are not checked.

    `published=True` reads the stored body of a version published earlier: it
    passed every check when it was published, and its runs must go on, so it
    is checked for its structure only, not against a tenant's limits (which
    may have been raised for it) nor rules that came after it (nesting,
    input schema references, overlapping branch writes, expressions: these
    are compiled when used, and one that no longer compiles fails its run).
    """
    if published:
        limits = _PUBLISHED
    data, problems = read_source(source, limits, nesting=not published)
    if problems:
        raise DefinitionError(problems)
    if data is None:
        raise DefinitionError([Problem("", "the definition is empty")])
    if not isinstance(data, dict):
        found = json_type_name(data)
        raise DefinitionError([Problem("", f"a definition is an object, not {found}")])
    name = data.get("name") if isinstance(data.get("name"), str) else None
    problems = list(json_problems(data, ""))
    if problems:
        raise DefinitionError(problems, name)

    problems = schema_problems(data)
    faulted = {problem.path for problem in problems}
    problems.extend(_Checker(limits, known_activities, faulted, not published).check(data))
    if problems:
        raise DefinitionError(problems, name)

    canonical = _canonical(data)
    all_steps: dict[str, Mapping[str, Any]] = {}
    parents: dict[str, str | None] = {}
    _index_steps(canonical["steps"], None, all_steps, parents)
    activities: set[str] = set()
    for step in all_steps.values():
        if "activity" in step:
            activities.add(step["activity"])
        if "compensate" in step:
            activities.add(step["compensate"]["activity"])
    return Definition(
        name=canonical["name"],
        data=canonical,
        digest=canonical_digest(canonical),
        start=canonical["start"],
        steps=MappingProxyType(canonical["steps"]),
        all_steps=MappingProxyType(all_steps),
        parents=MappingProxyType(parents),
        timeout=float(canonical["timeout"]) if "timeout" in canonical else None,
        input_schema=canonical.get("input"),
        activities=frozenset(activities),
        on_cancel=canonical.get("on_cancel", "none"),
    )
