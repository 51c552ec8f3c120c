"""Reading a definition: its text into a structure, and the structure against the schema.

The first two passes of validation (`validate` runs the third). The text is
read as YAML or JSON; a syntax error stops there, as nothing further can be
located. The structure read must hold JSON values only, and is then checked
against the JSON Schema, each error said as a located `Problem` in the words a
definition's author uses.

Decisions:

- YAML is read with the safe loader, without aliases (an alias can make a
  small text expand into a huge structure), without duplicate keys, and with
  dates left as strings; values must be JSON values.
- Objects and arrays nest at most `MAX_NESTING` levels. YAML is refused as
  soon as it goes deeper (at its line and column), JSON text too deep for the
  parser is located the same way, and anything else by its path: the checks
  after reading recurse, and must never meet Python's recursion limit.
- A number the parser refuses (an integer of thousands of digits) is a
  problem of the text like any other.
- The schema reports at most one problem per location, the first found.
"""

from __future__ import annotations

import difflib
import functools
import json
import math
from collections.abc import Iterator, Mapping
from typing import Any

import jsonschema
import yaml

from waypost.model.definitions.format import (
    MAX_NESTING,
    Limits,
    Problem,
    canonical_json,
    definition_schema,
    join_all,
    join_path,
    json_type_name,
    nesting_problem,
    text_problem,
    too_deep_at,
)

__all__ = ["json_problems", "read_source", "schema_problems"]


# Reading ---------------------------------------------------------------------


class _Loader(yaml.SafeLoader):
    """The safe loader without aliases, duplicate keys, non-string keys or dates."""

    nesting = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            raise yaml.composer.ComposerError(
                None, None, "aliases (*name) are not allowed in a definition", event.start_mark
            )
        container = self.check_event(yaml.MappingStartEvent, yaml.SequenceStartEvent)
        if container:
            self.nesting += 1
            if self.nesting > MAX_NESTING:
                event = self.peek_event()  # type: ignore[no-untyped-call]
                raise yaml.composer.ComposerError(
                    None, None, f"nested more than {MAX_NESTING} levels deep", event.start_mark
                )
        try:
            return super().compose_node(parent, index)
        finally:
            if container:
                self.nesting -= 1

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


def read_source(
    source: str | bytes | Mapping[str, Any], limits: Limits, *, nesting: bool = True
) -> tuple[Any, list[Problem]]:
    """The structure `source` holds, or what stops it being read (size, encoding, syntax).

    Text is read as JSON when its first non-blank character is `{`, as YAML
    otherwise; a structure given as such is returned as it is, once its size is
    checked. `nesting=False` skips the check of how deep it nests (for the
    stored body of a published version, which was checked when published).
    """
    if isinstance(source, bytes | str):
        size = len(source.encode("utf-8", "surrogatepass") if isinstance(source, str) else source)
    else:
        too_deep = nesting_problem(source) if nesting else None
        if too_deep is not None:
            return None, [too_deep]
        try:
            size = len(canonical_json(source))
        except (TypeError, ValueError):
            size = 0  # not JSON at all: the value check says where
    if size > limits.max_definition_bytes:
        message = f"at most {limits.max_definition_bytes} bytes (found {size})"
        return None, [Problem("", message)]
    if not isinstance(source, bytes | str):
        return source, []
    data, problems = _parse_text(source)
    if not problems:
        too_deep = nesting_problem(data)
        if too_deep is not None:
            return None, [too_deep]
    return data, problems


def _parse_text(source: str | bytes) -> tuple[Any, list[Problem]]:
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
        except RecursionError:
            return None, [Problem("", f"invalid JSON at {_too_deep_at(text)}")]
        except ValueError as exc:  # a number Python refuses to read
            return None, [Problem("", f"invalid JSON: {' '.join(str(exc).split())}")]
    try:
        return yaml.load(text, Loader=_Loader), []  # _Loader is a SafeLoader
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        detail = exc.problem or exc.context or "cannot be read"
        return None, [Problem("", f"invalid YAML{where}: {detail}")]
    except yaml.YAMLError as exc:
        return None, [Problem("", f"invalid YAML: {' '.join(str(exc).split())}")]
    except ValueError as exc:  # a number Python refuses to read
        return None, [Problem("", f"invalid YAML: {' '.join(str(exc).split())}")]


def _too_deep_at(text: str) -> str:
    """Where JSON text first nests more than `MAX_NESTING` levels ("line L, column C: ...")."""
    found = too_deep_at(text, MAX_NESTING)
    if found is None:
        return f"nested more than {MAX_NESTING} levels deep"
    line, column = found
    return f"line {line}, column {column}: nested more than {MAX_NESTING} levels deep"


def json_problems(value: Any, path: str) -> Iterator[Problem]:
    """Where `value`, found at `path`, holds what is not a JSON value."""
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                yield Problem(path, f"keys must be strings, not {type(key).__name__}")
            elif text_problem(key) is not None:
                yield Problem(path, f"has a key that {text_problem(key)}")
            else:
                yield from json_problems(item, join_path(path, key))
    elif isinstance(value, str):
        said = text_problem(value)
        if said is not None:
            yield Problem(path, said)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from json_problems(item, join_path(path, index))
    elif isinstance(value, float):
        if not math.isfinite(value):
            yield Problem(path, "must be a finite number")
    elif not (value is None or isinstance(value, str | int | bool)):
        yield Problem(path, f"must be a JSON value, not {type(value).__name__}")


# Schema ----------------------------------------------------------------------

_UNITS = {
    "minItems": "items",
    "maxItems": "items",
    "minLength": "characters",
    "maxLength": "characters",
    "minProperties": "entries",
    "maxProperties": "entries",
}
_BOUNDS = {
    **{v: "at least" for v in ("minimum", "minItems", "minLength", "minProperties")},
    **{v: "at most" for v in ("maximum", "maxItems", "maxLength", "maxProperties")},
}


def _error_problems(error: jsonschema.ValidationError) -> Iterator[Problem]:
    path = join_all(error.absolute_path)
    instance = error.instance
    schema = error.schema if isinstance(error.schema, Mapping) else {}
    rule: Any = error.validator_value
    if "propertyNames" in error.schema_path:
        yield Problem(join_path(path, str(instance)), schema.get("errorMessage", error.message))
    elif error.validator == "additionalProperties" and isinstance(instance, Mapping):
        known = list(schema.get("properties", {}))
        for key in instance:
            if key not in known:
                close = difflib.get_close_matches(key, known, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                yield Problem(join_path(path, key), f"unknown field{hint}")
    elif error.validator == "required" and isinstance(instance, Mapping):
        for key in rule:
            if key not in instance:
                yield Problem(join_path(path, key), "is required")
    elif error.validator == "dependentRequired" and isinstance(instance, Mapping):
        for key, needed in rule.items():
            missing = [name for name in needed if key in instance and name not in instance]
            if missing:
                yield Problem(join_path(path, key), f"needs {missing[0]!r} as well")
    elif "errorMessage" in schema:
        yield Problem(path, schema["errorMessage"])
    elif error.validator == "enum":
        allowed = ", ".join(str(value) for value in rule)
        yield Problem(path, f"must be one of {allowed} (not {instance!r})")
    elif error.validator in _BOUNDS:
        bound = _BOUNDS[error.validator]
        unit = _UNITS.get(error.validator)
        yield Problem(
            path, f"must have {bound} {rule} {unit}" if unit else f"must be {bound} {rule}"
        )
    elif error.validator == "const":
        yield Problem(path, f"must be {rule!r}")
    elif error.validator == "type":
        names = rule if isinstance(rule, list) else [rule]
        found = json_type_name(instance)
        yield Problem(path, f"must be of type {' or '.join(names)}, not {found}")
    else:
        yield Problem(path, error.message)


@functools.cache
def _validator() -> jsonschema.protocols.Validator:
    return jsonschema.Draft202012Validator(definition_schema())


def schema_problems(data: Any) -> list[Problem]:
    """Where `data` does not follow the JSON Schema of a definition, one problem per location."""
    problems: list[Problem] = []
    faulted: set[str] = set()
    for error in _validator().iter_errors(data):
        for problem in _error_problems(error):
            if problem.path not in faulted:
                faulted.add(problem.path)
                problems.append(problem)
    return problems
