"""The definition format: its vocabulary, records, JSON Schema, digest and durations.

What the other modules of `waypost.model.definitions` share: the step types and
the fields that name a target or hold a duration, a located `Problem` and the
errors that list them, a tenant's `Limits`, the validated `Definition`, the
JSON Schema, canonical JSON and its digest, durations, and the dotted paths
that locate a problem (`steps.approve.approvers.quorum`,
`steps.split.branches[0].steps.ship.next`).

Limits are per tenant and not part of the content: the same definition has the
same digest whatever the limits it was checked against.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from waypost.errors import WaypostError
from waypost.model.definitions.expressions import (
    DEFAULT_BUDGET,
    Budget,
    Expression,
    compile_expression,
)
from waypost.model.identity import preview
from waypost.model.numbers import finite

__all__ = [
    "CATCHING_TYPES",
    "DURATION_FIELDS",
    "MAX_NESTING",
    "RETRY_DURATION_FIELDS",
    "STEP_TYPES",
    "TARGET_FIELDS",
    "Definition",
    "DefinitionError",
    "InputError",
    "Limits",
    "Problem",
    "canonical_digest",
    "canonical_json",
    "definition_schema",
    "describe_duration",
    "inner_scopes",
    "join_all",
    "join_path",
    "json_type_name",
    "nesting_problem",
    "parse_duration",
    "text_problem",
    "unstorable_problem",
]

STEP_TYPES = (
    "activity",
    "approval",
    "wait",
    "choice",
    "parallel",
    "map",
    "pass",
    "call",
    "succeed",
    "fail",
)
# Step types that may end badly, and so may say where a failure goes (`catch`).
CATCHING_TYPES = ("activity", "approval", "wait", "parallel", "map", "pass", "call")
# Fields of a step that name the step to go to next.
TARGET_FIELDS = ("next", "default", "on_reject", "on_expiry", "on_timeout")
# Fields of a step that hold a duration.
DURATION_FIELDS = ("timeout", "expires_in", "duration")
RETRY_DURATION_FIELDS = ("initial_interval", "max_interval")
MAX_NESTING = 64
"""How many levels of objects and arrays a definition, or a run's input, may nest.

Deep enough for any real process; shallow enough that every check on the way
(the JSON Schema validators, the canonical form, the codec) stays far from
Python's recursion limit.
"""


def too_deep_at(text: str, limit: int) -> tuple[int, int] | None:
    """(line, column) where JSON text first nests objects and arrays more than `limit`
    deep; None if it never does (a linear scan, nothing parsed)."""
    depth = 0
    in_string = escaped = False
    line, line_start = 1, 0
    for index, char in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > limit:
                return line, index - line_start + 1
        elif char in "]}":
            depth -= 1
        if char == "\n":
            line, line_start = line + 1, index + 1
    return None


_ISO_DURATION = re.compile(
    r"^P(?!$)(?:(\d+)W)?(?:(\d+)D)?(?:T(?=\d)(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$"
)
_SIMPLE_KEY = re.compile(r"^[A-Za-z_$][A-Za-z0-9_$-]*$")

_JSON_TYPES = {
    dict: "an object",
    list: "an array",
    str: "a string",
    bool: "a boolean",
    int: "a number",
    float: "a number",
    type(None): "null",
}


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
    """What a tenant's definitions may contain, and what their runs may compute.

    Checked when a definition is published: `max_steps` (steps in all, branch
    and map iterator steps included), `max_depth` (parallel and map steps inside
    one another), `max_parallel_width` (branches of one parallel step),
    `max_map_depth` (map steps inside map steps' iterators), `max_map_items`
    and `max_map_concurrency` (the most a map step's `max_items` and
    `concurrency` may say), `max_total_timeout`
    (seconds; the definition's `timeout` and every duration in it) and
    `max_definition_bytes` (the text, or the canonical JSON of a dict).

    Applied to runs: `max_total_timeout` is also how long any run of the
    tenant's definitions may take, with or without a `timeout` of its own;
    `max_expression_steps` and `max_expression_size` are the `Budget` of every
    expression a run evaluates (nodes visited; characters of JSON of each value
    built), and `max_run_expression_steps` and `max_run_expression_size` bound all of
    a run's evaluations together (so neither the run nor a replay or query of it can
    cost more, whatever it loops over); `max_map_items` and `max_map_concurrency` are
    also what a map step
    that sets no `max_items` (or `concurrency`) of its own allows. A run records
    these when it starts and keeps them, so a later change of the tenant's
    limits applies to new runs only.

    Applied when a run starts: `max_input_checks`, how many keywords of the
    input schema checking the run's input may apply (each keyword on each value
    counts).

    Applied to every run of the tenant, code workflows too: `max_payload_bytes`
    (a run's input, a signal's payload: bytes of its JSON) and
    `max_pending_signals` (signals a run has received and its code has not taken
    in yet; more are refused until it does).
    """

    max_steps: int = 20
    max_depth: int = 3
    max_parallel_width: int = 5
    max_map_depth: int = 2
    max_map_items: int = 1_000
    max_map_concurrency: int = 10
    max_total_timeout: float = 90 * 24 * 3600.0
    max_definition_bytes: int = 256_000
    max_expression_steps: int = DEFAULT_BUDGET.max_steps
    max_expression_size: int = DEFAULT_BUDGET.max_size
    max_run_expression_steps: int = 1_000_000
    max_run_expression_size: int = 50_000_000
    max_input_checks: int = 100_000
    max_payload_bytes: int = 1_000_000
    max_pending_signals: int = 1_000

    def __post_init__(self) -> None:
        for name in (
            "max_steps",
            "max_depth",
            "max_parallel_width",
            "max_map_depth",
            "max_map_items",
            "max_map_concurrency",
            "max_definition_bytes",
            "max_expression_steps",
            "max_expression_size",
            "max_run_expression_steps",
            "max_run_expression_size",
            "max_input_checks",
            "max_payload_bytes",
            "max_pending_signals",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"Limits.{name} must be a positive integer, got {value!r}")
        if not (math.isfinite(self.max_total_timeout) and self.max_total_timeout > 0):
            raise ValueError(
                f"Limits.max_total_timeout must be a positive number of seconds, "
                f"got {self.max_total_timeout!r}"
            )

    def expression_budget(self) -> Budget:
        """The budget of each expression a run evaluates."""
        return Budget(self.max_expression_steps, self.max_expression_size)


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
    """Every step by id, those inside parallel branches and map iterators included."""
    parents: Mapping[str, str | None]
    """For each step, the id of the parallel (or map) step whose branch (or iterator)
    holds it; None at top level."""
    timeout: float | None
    """The total timeout in seconds, when the definition sets one."""
    input_schema: Mapping[str, Any] | bool | None
    activities: frozenset[str]
    """The registered activities the definition calls, compensations included."""
    on_cancel: str = "none"
    """What a cancelled run does before it ends: `compensate` its completed steps, or `none`."""
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
        seconds = finite(value)
        if seconds is None or seconds < 0:
            raise ValueError(
                f"must be a duration: a finite number of seconds, not {preview(value)}"
            )
        return seconds
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


def describe_duration(seconds: float) -> str:
    """A duration as a message says it: "90 days", "2 hours", "1.5 seconds"."""
    for unit, size in (("days", 86400), ("hours", 3600), ("minutes", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)} {unit}"
    return f"{int(seconds) if float(seconds).is_integer() else seconds} seconds"


def inner_scopes(step: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """(location inside the step, scope) of each sub-graph of a step: the branches of a
    parallel step (`branches[0]`, ...) or the iterator of a map step (`iterator`).

    A scope is `{start, steps}` when the definition is valid; it is returned as
    found, so the checks that tolerate a malformed structure can use it too.
    """
    found: list[tuple[str, Any]] = []
    branches = step.get("branches")
    if isinstance(branches, list):
        found.extend((f"branches[{index}]", branch) for index, branch in enumerate(branches))
    iterator = step.get("iterator")
    if step.get("type") == "map" and iterator is not None:
        found.append(("iterator", iterator))
    return found


def join_path(base: str, key: str | int) -> str:
    """The location of `key` (a field, or an index) inside the location `base`."""
    if isinstance(key, int):
        return f"{base}[{key}]"
    part = key if _SIMPLE_KEY.match(key) else json.dumps(key)
    return f"{base}.{part}" if base else part


def join_all(parts: Iterable[str | int]) -> str:
    """The location of a path of fields and indexes from the top."""
    path = ""
    for part in parts:
        path = join_path(path, part)
    return path


def json_type_name(value: Any) -> str:
    """What kind of JSON value `value` is, as a message names it ("an object", "null")."""
    return _JSON_TYPES.get(type(value), type(value).__name__)


_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACKET = re.compile(r"[\[\]{}]")


def _as_json(value: Any) -> str | None:
    """`value` as JSON text, surrogates and all, or None where the encoder cannot say it."""
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        return None


def _json_depth(text: str) -> int:
    """How deep the objects and arrays of a JSON text nest."""
    brackets = _BRACKET.findall(_JSON_STRING.sub("", text))
    if len(brackets) <= 2 * MAX_NESTING:
        return (len(brackets) + 1) // 2  # cannot nest deeper than it has pairs
    depth = deepest = 0
    for bracket in brackets:
        depth += 1 if bracket in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def nesting_problem(value: Any, base: str = "") -> Problem | None:
    """Where `value` nests objects and arrays more than `MAX_NESTING` levels deep, if it does.

    Walks without recursion, so it can be asked about any value. A value within the limit
    is told by its JSON text, which the C encoder writes far faster than a walk in Python
    (a tenant's input of a megabyte costs milliseconds, not a second).
    """
    text = _as_json(value)
    if text is not None and _json_depth(text) <= MAX_NESTING:
        return None
    # (value, depth of its container, the keys that lead to it as a linked list)
    todo: list[tuple[Any, int, Any]] = [(value, 0, None)]
    while todo:
        item, depth, trail = todo.pop()
        if isinstance(item, Mapping):
            children: Iterable[tuple[str | int, Any]] = item.items()
        elif isinstance(item, list | tuple):
            children = enumerate(item)
        else:
            continue
        depth += 1
        if depth > MAX_NESTING:
            keys: list[str | int] = []
            while trail is not None:
                key, trail = trail
                keys.append(key)
            path = base
            for key in reversed(keys):
                path = join_path(path, key if isinstance(key, int) else str(key))
            return Problem(path, f"nested more than {MAX_NESTING} levels deep")
        todo.extend((child, depth, (key, trail)) for key, child in children)
    return None


def text_problem(text: str) -> str | None:
    """Why `text` cannot be stored as it is (both stores hold UTF-8 text without NUL)."""
    if "\x00" in text:
        return "contains a NUL character, which cannot be stored"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "contains half of a surrogate pair, which is not text"
    return None


def unstorable_problem(value: Any, base: str = "") -> Problem | None:
    """The first string (or key) in `value` that cannot be stored, located (no recursion).

    A value whose JSON text has no NUL (`\\u0000`) and encodes as UTF-8 has none; only
    one that may have is walked, to say where.
    """
    text = _as_json(value)
    if text is not None and "\\u0000" not in text and text_problem(text) is None:
        return None
    todo: list[tuple[Any, str]] = [(value, base)]
    while todo:
        item, path = todo.pop()
        if isinstance(item, str):
            said = text_problem(item)
            if said is not None:
                return Problem(path, said)
        elif isinstance(item, Mapping):
            for key, child in item.items():
                said = text_problem(key) if isinstance(key, str) else None
                if said is not None:
                    return Problem(path, f"has a key that {said}")
                todo.append((child, join_path(path, str(key))))
        elif isinstance(item, list | tuple):
            todo.extend((child, join_path(path, index)) for index, child in enumerate(item))
    return None
