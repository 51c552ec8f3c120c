"""Parse, validate and digest a workflow definition.

Validation runs in three passes and reports every problem it finds, never
just the first: the text is read (YAML or JSON; a syntax error stops there, as
nothing further can be located), the structure is checked against the JSON
Schema, and static checks follow the transitions between steps. Each problem
names its location as a dotted path (`steps.approve.approvers.quorum`,
`steps.split.branches[0].steps.ship.next`). The static checks tolerate a
structure the schema refused, and a location the schema already faulted is
not reported twice.

Decisions:

- Step ids are unique across the whole definition, branches included, so an
  event or a migration mapping can name a step by its id alone. A step goes
  only to steps of its own scope: the top level, or its parallel branch.
- YAML is read with the safe loader, without aliases (an alias can make a
  small text expand into a huge structure), without duplicate keys, and with
  dates left as strings; values must be JSON values.
- A loop must be bounded. It is when one of its steps is a `choice` with
  `max_iterations`, a `wait` for a `signal` with a `timeout` whose way out
  (`on_timeout`, or failing the run) leaves the loop, or an `approval` with
  `expires_in` whose way out (`on_expiry`, or failing the run) leaves it.
  So every turn either is counted or needs an outside event that, when it
  does not come, ends the loop.
- Limits are per tenant and not part of the content: the same definition has
  the same digest whatever the limits it was checked against.
- The canonical form is the validated structure with every duration in
  seconds (an integer when whole), a `compensate` given as a bare name
  spelled `{activity: name}`, and the editor hint `$schema` removed; the
  digest is the SHA-256 of its JSON with sorted keys and no whitespace.
"""

from __future__ import annotations

import copy
import difflib
import functools
import hashlib
import json
import math
import re
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from importlib import resources
from types import MappingProxyType
from typing import Any

import jsonschema
import jsonschema.validators
import yaml

from waypost.errors import WaypostError
from waypost.model.definitions.expressions import (
    Expression,
    ExpressionError,
    compile_expression,
)

__all__ = [
    "Definition",
    "DefinitionError",
    "Limits",
    "Problem",
    "canonical_digest",
    "definition_schema",
    "parse_definition",
    "parse_duration",
]

STEP_TYPES = ("activity", "approval", "wait", "choice", "parallel", "succeed", "fail")
# Fields of a step that name the step to go to next.
TARGET_FIELDS = ("next", "default", "on_reject", "on_expiry", "on_timeout")
# Fields of a step that hold a duration.
DURATION_FIELDS = ("timeout", "expires_in", "duration")
RETRY_DURATION_FIELDS = ("initial_interval", "max_interval")
# Beyond this many steps in one scope the definition is refused on count alone,
# and the graph checks are skipped rather than run on a pathological input.
_GRAPH_CHECK_MAX_STEPS = 1000

_ISO_DURATION = re.compile(
    r"^P(?!$)(?:(\d+)W)?(?:(\d+)D)?(?:T(?=\d)(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$"
)
_SIMPLE_KEY = re.compile(r"^[A-Za-z_$][A-Za-z0-9_$-]*$")


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a definition, and where."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path or '(definition)'}: {self.message}"


class DefinitionError(WaypostError, ValueError):
    """A definition is invalid; `problems` lists everything found wrong with it."""

    def __init__(self, problems: Iterable[Problem], name: str | None = None) -> None:
        self.problems = list(problems)
        self.name = name
        super().__init__(self._describe())

    def _describe(self) -> str:
        what = f"definition {self.name!r}" if self.name else "definition"
        count = len(self.problems)
        lines = [f"{what} is invalid ({count} problem{'s' if count != 1 else ''}):"]
        lines.extend(f"  {problem}" for problem in self.problems)
        return "\n".join(lines)

    def __str__(self) -> str:
        return self._describe()


class InputError(WaypostError, ValueError):
    """A run's input does not satisfy its definition's input schema."""

    def __init__(self, name: str, problems: Iterable[Problem]) -> None:
        self.name = name
        self.problems = list(problems)
        lines = [f"the input does not satisfy definition {name!r}:"]
        lines.extend(f"  {problem}" for problem in self.problems)
        super().__init__("\n".join(lines))


@dataclass(frozen=True)
class Limits:
    """What a tenant's definitions may contain."""

    max_steps: int = 20
    max_depth: int = 3
    max_parallel_width: int = 5
    max_total_timeout: float = 90 * 24 * 3600.0
    max_definition_bytes: int = 256_000

    def __post_init__(self) -> None:
        for name in ("max_steps", "max_depth", "max_parallel_width", "max_definition_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"Limits.{name} must be a positive integer, got {value!r}")
        if not (math.isfinite(self.max_total_timeout) and self.max_total_timeout > 0):
            raise ValueError(
                f"Limits.max_total_timeout must be a positive number of seconds, "
                f"got {self.max_total_timeout!r}"
            )


@dataclass(frozen=True, eq=False)
class Definition:
    """A validated definition in canonical form. Treat `data` as read-only."""

    name: str
    data: dict[str, Any]
    digest: str
    start: str
    steps: Mapping[str, Mapping[str, Any]]
    """The top-level steps by id."""
    all_steps: Mapping[str, Mapping[str, Any]]
    """Every step by id, those inside parallel branches included."""
    parents: Mapping[str, str | None]
    """For each step, the id of the parallel step whose branch holds it (None at top level)."""
    timeout: float | None
    """The total timeout in seconds, when the definition sets one."""
    input_schema: Mapping[str, Any] | bool | None
    activities: frozenset[str]
    """The registered activities the definition calls, compensations included."""
    _expressions: dict[str, Expression] = field(default_factory=dict, repr=False)

    def expression(self, text: str) -> Expression:
        """The compiled form of an expression of this definition."""
        compiled = self._expressions.get(text)
        if compiled is None:
            compiled = self._expressions[text] = compile_expression(text)
        return compiled

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Definition) and other.digest == self.digest

    def __hash__(self) -> int:
        return hash(self.digest)


@functools.cache
def _schema() -> dict[str, Any]:
    text = resources.files(__package__).joinpath("schema.json").read_text("utf-8")
    loaded: dict[str, Any] = json.loads(text)
    return loaded


@functools.cache
def _validator() -> jsonschema.protocols.Validator:
    return jsonschema.Draft202012Validator(_schema())


def definition_schema() -> dict[str, Any]:
    """The JSON Schema (Draft 2020-12) of a definition."""
    return copy.deepcopy(_schema())


def canonical_json(data: Any) -> bytes:
    """JSON with sorted keys and no whitespace, as UTF-8."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text.encode("utf-8")


def canonical_digest(data: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of the canonical JSON of `data`."""
    return hashlib.sha256(canonical_json(data)).hexdigest()


def parse_duration(value: Any) -> float:
    """Seconds in a duration: a number of seconds or ISO-8601 (weeks to seconds)."""
    if isinstance(value, bool):
        raise ValueError(f"a duration is a number of seconds or an ISO-8601 string, not {value}")
    if isinstance(value, int | float):
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"a duration cannot be negative or infinite, got {value}")
        return float(value)
    if isinstance(value, str):
        match = _ISO_DURATION.match(value)
        if match is None:
            raise ValueError(
                f"{value!r} is not an ISO-8601 duration such as 'PT30M', 'P3D' or 'P1DT12H' "
                "(months and years have no fixed length: use days)"
            )
        weeks, days, hours, minutes, seconds = (float(group or 0) for group in match.groups())
        return (((weeks * 7 + days) * 24 + hours) * 60 + minutes) * 60 + seconds
    raise ValueError(f"a duration is a number of seconds or an ISO-8601 string, not {value!r}")


def _seconds(value: float) -> int | float:
    return int(value) if value.is_integer() else value


def _join(base: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{base}[{key}]"
    part = key if _SIMPLE_KEY.match(key) else json.dumps(key)
    return f"{base}.{part}" if base else part


def _join_all(parts: Iterable[str | int]) -> str:
    path = ""
    for part in parts:
        path = _join(path, part)
    return path


def _describe_duration(seconds: float) -> str:
    for unit, size in (("days", 86400), ("hours", 3600), ("minutes", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)} {unit}"
    return f"{_seconds(seconds)} seconds"


# Reading ---------------------------------------------------------------------


class _Loader(yaml.SafeLoader):
    """The safe loader without aliases, duplicate keys, non-string keys or dates."""

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            raise yaml.composer.ComposerError(
                None, None, "aliases (*name) are not allowed in a definition", event.start_mark
            )
        return super().compose_node(parent, index)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[str] = set()
        for key_node, _ in node.value:
            if not (isinstance(key_node, yaml.ScalarNode) and key_node.tag.endswith(":str")):
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"keys must be strings (quote {key_node.value!r} to make it one)",
                    key_node.start_mark,
                )
            if key_node.value in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key_node.value!r}", key_node.start_mark
                )
            seen.add(key_node.value)
        return super().construct_mapping(node, deep=deep)


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


class _DuplicateKey(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateKey(f"duplicate key {key!r}")
        result[key] = value
    return result


def _read(source: str | bytes | Mapping[str, Any], limits: Limits) -> tuple[Any, list[Problem]]:
    if isinstance(source, bytes | str):
        size = len(source.encode("utf-8") if isinstance(source, str) else source)
    else:
        try:
            size = len(canonical_json(source))
        except (TypeError, ValueError):
            size = 0  # not JSON at all: the value check says where
    if size > limits.max_definition_bytes:
        message = f"at most {limits.max_definition_bytes} bytes (found {size})"
        return None, [Problem("", message)]
    if not isinstance(source, bytes | str):
        return source, []
    if isinstance(source, bytes):
        try:
            text = source.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            return None, [Problem("", f"not UTF-8 text (byte {exc.start})")]
    else:
        text = source
    if text.lstrip().startswith("{"):
        try:
            return json.loads(text, object_pairs_hook=_unique_keys), []
        except json.JSONDecodeError as exc:
            where = f"line {exc.lineno}, column {exc.colno}"
            return None, [Problem("", f"invalid JSON at {where}: {exc.msg}")]
        except _DuplicateKey as exc:
            return None, [Problem("", f"invalid JSON: {exc}")]
    try:
        return yaml.load(text, Loader=_Loader), []  # _Loader is a SafeLoader
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        detail = exc.problem or exc.context or "cannot be read"
        return None, [Problem("", f"invalid YAML{where}: {detail}")]
    except yaml.YAMLError as exc:
        return None, [Problem("", f"invalid YAML: {exc}")]


def _json_problems(value: Any, path: str) -> Iterator[Problem]:
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                yield Problem(path, f"keys must be strings, not {type(key).__name__}")
            else:
                yield from _json_problems(item, _join(path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _json_problems(item, _join(path, index))
    elif isinstance(value, float):
        if not math.isfinite(value):
            yield Problem(path, "must be a finite number")
    elif not (value is None or isinstance(value, str | int | bool)):
        yield Problem(path, f"must be a JSON value, not {type(value).__name__}")


# Schema ----------------------------------------------------------------------

_JSON_TYPES = {
    dict: "an object",
    list: "an array",
    str: "a string",
    bool: "a boolean",
    int: "a number",
    float: "a number",
    type(None): "null",
}


_UNITS = {
    "minItems": "items",
    "maxItems": "items",
    "minLength": "characters",
    "maxLength": "characters",
    "minProperties": "entries",
    "maxProperties": "entries",
}


def _schema_problems(error: jsonschema.ValidationError) -> Iterator[Problem]:
    path = _join_all(error.absolute_path)
    instance = error.instance
    schema = error.schema if isinstance(error.schema, Mapping) else {}
    rule: Any = error.validator_value
    if "propertyNames" in error.schema_path:
        yield Problem(_join(path, str(instance)), schema.get("errorMessage", error.message))
    elif error.validator == "additionalProperties" and isinstance(instance, Mapping):
        known = list(schema.get("properties", {}))
        for key in instance:
            if key not in known:
                close = difflib.get_close_matches(key, known, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                yield Problem(_join(path, key), f"unknown field{hint}")
    elif error.validator == "required" and isinstance(instance, Mapping):
        for key in rule:
            if key not in instance:
                yield Problem(_join(path, key), "is required")
    elif error.validator == "dependentRequired" and isinstance(instance, Mapping):
        for key, needed in rule.items():
            missing = [name for name in needed if key in instance and name not in instance]
            if missing:
                yield Problem(_join(path, key), f"needs {missing[0]!r} as well")
    elif "errorMessage" in schema:
        yield Problem(path, schema["errorMessage"])
    elif error.validator == "enum":
        allowed = ", ".join(str(value) for value in rule)
        yield Problem(path, f"must be one of {allowed} (not {instance!r})")
    elif error.validator in ("minimum", "minItems", "minLength", "minProperties"):
        yield Problem(
            path,
            f"must be at least {rule}"
            if error.validator == "minimum"
            else f"must have at least {rule} {_UNITS[error.validator]}",
        )
    elif error.validator in ("maximum", "maxItems", "maxLength", "maxProperties"):
        yield Problem(
            path,
            f"must be at most {rule}"
            if error.validator == "maximum"
            else f"must have at most {rule} {_UNITS[error.validator]}",
        )
    elif error.validator == "const":
        yield Problem(path, f"must be {rule!r}")
    elif error.validator == "type":
        names = rule if isinstance(rule, list) else [rule]
        found = _JSON_TYPES.get(type(instance), type(instance).__name__)
        yield Problem(path, f"must be of type {' or '.join(names)}, not {found}")
    else:
        yield Problem(path, error.message)


# Static checks ---------------------------------------------------------------


def _targets(step: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """(field, step id) for every transition out of `step`."""
    found = [(name, step[name]) for name in TARGET_FIELDS if name in step]
    choices = step.get("choices")
    if isinstance(choices, list):
        for index, choice in enumerate(choices):
            if isinstance(choice, Mapping) and "next" in choice:
                found.append((f"choices[{index}].next", choice["next"]))
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


class _Checker:
    def __init__(
        self, limits: Limits, known_activities: Collection[str] | None, faulted: set[str]
    ) -> None:
        self.limits = limits
        self.known = None if known_activities is None else sorted(set(known_activities))
        self.faulted = faulted
        self.problems: list[Problem] = []
        self.step_count = 0
        self.where: dict[str, str] = {}  # step id -> path where it is defined
        self.durations: list[tuple[str, float]] = []

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
            branches = step.get("branches") if isinstance(step, Mapping) else None
            if isinstance(branches, list):
                for index, branch in enumerate(branches):
                    if isinstance(branch, Mapping):
                        self.collect_ids(branch.get("steps"), f"{path}.branches[{index}].")

    def unknown_target(self, target: str) -> str:
        if target in self.where:
            return (
                f"step {target!r} is in another scope (at {self.where[target]}): "
                "a step can only go to steps of its own branch or level"
            )
        return f"no step {target!r}"

    def scope(self, steps: Any, start: Any, prefix: str, depth: int) -> None:
        if not isinstance(steps, Mapping):
            return
        if isinstance(start, str) and start not in steps:
            self.add(f"{prefix}start", self.unknown_target(start))
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
                    self.add(f"{path}.{name}", self.unknown_target(target))
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
        elif kind == "choice":
            choices = step.get("choices")
            for index, choice in enumerate(choices if isinstance(choices, list) else []):
                if isinstance(choice, Mapping):
                    self.expression(choice.get("when"), f"{path}.choices[{index}].when")
        elif kind == "succeed":
            self.expression(step.get("output"), f"{path}.output")
        elif kind == "parallel":
            self.parallel(step, path, depth)

    def activity(self, step: Mapping[str, Any], path: str) -> None:
        self.activity_name(step.get("activity"), f"{path}.activity")
        self.mapping(step.get("input"), f"{path}.input")
        http = step.get("http")
        if isinstance(http, Mapping):
            self.mapping(http.get("body"), f"{path}.http.body")
        compensate = step.get("compensate")
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
        if approvers.get("all") is True:
            if quorum is not None:
                self.add(f"{path}.all", "cannot be combined with quorum")
            elif approvers.get("groups"):
                self.add(f"{path}.all", "needs users, not groups (a group's members change)")
        only_users = isinstance(users, list) and not approvers.get("groups")
        if only_users and isinstance(quorum, int) and quorum > len(users):
            self.add(f"{path}.quorum", f"{quorum} cannot be reached by {len(users)} listed users")

    def parallel(self, step: Mapping[str, Any], path: str, depth: int) -> None:
        depth += 1
        if depth > self.limits.max_depth:
            self.add(
                path, f"parallel steps nest at most {self.limits.max_depth} deep (found {depth})"
            )
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

    def mapping(self, mapping: Any, path: str) -> None:
        if isinstance(mapping, Mapping):
            for name, value in mapping.items():
                self.expression(value, _join(path, name))

    def expression(self, text: Any, path: str) -> None:
        if not isinstance(text, str):
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
                    f"at most {_describe_duration(ceiling)} (found {_describe_duration(total)})",
                )
            ceiling = min(total, ceiling)
        for path, seconds in self.durations:
            if seconds > ceiling:
                self.add(
                    path,
                    f"{_describe_duration(seconds)} is longer than the total timeout of a run "
                    f"({_describe_duration(ceiling)})",
                )

    def check_input_schema(self, schema: Any) -> None:
        if not isinstance(schema, Mapping):
            return
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        for error in cls(cls.META_SCHEMA).iter_errors(schema):
            self.add(_join_all(["input", *error.absolute_path]), f"invalid schema: {error.message}")


def input_problems(definition: Definition, value: Any) -> list[Problem]:
    """What is wrong with `value` as the input of a run of `definition` (located)."""
    if not isinstance(value, Mapping) and value is not None:
        found = _JSON_TYPES.get(type(value), type(value).__name__)
        return [Problem("input", f"the input of a definition run is an object, not {found}")]
    schema = definition.input_schema
    if schema is None:
        return []
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    problems = []
    for error in sorted(cls(schema).iter_errors(value or {}), key=lambda e: list(e.path)):
        problems.append(Problem(_join_all(["input", *error.absolute_path]), error.message))
    return problems


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
    for branch in step.get("branches", ()):
        branch["steps"] = {key: _canonical_step(value) for key, value in branch["steps"].items()}
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
        for branch in step.get("branches", ()):
            _index_steps(branch["steps"], step_id, all_steps, parents)


# Entry point -----------------------------------------------------------------


def parse_definition(
    source: str | bytes | Mapping[str, Any],
    *,
    limits: Limits = Limits(),
    known_activities: Collection[str] | None = None,
) -> Definition:
    """Read and validate a definition given as YAML or JSON text, or as a dict.

    Raises `DefinitionError` listing every problem found, each with its
    location. `known_activities`, when given, are the activity names a step
    may call; otherwise activity names are not checked.
    """
    data, problems = _read(source, limits)
    if problems:
        raise DefinitionError(problems)
    if data is None:
        raise DefinitionError([Problem("", "the definition is empty")])
    if not isinstance(data, dict):
        found = _JSON_TYPES.get(type(data), type(data).__name__)
        raise DefinitionError([Problem("", f"a definition is an object, not {found}")])
    name = data.get("name") if isinstance(data.get("name"), str) else None
    problems = list(_json_problems(data, ""))
    if problems:
        raise DefinitionError(problems, name)

    faulted: set[str] = set()
    for error in _validator().iter_errors(data):
        for problem in _schema_problems(error):
            if problem.path not in faulted:
                faulted.add(problem.path)
                problems.append(problem)
    problems.extend(_Checker(limits, known_activities, faulted).check(data))
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
    )
