"""Expressions over a run's data: JMESPath, compiled once, evaluated without side effects.

JMESPath (https://jmespath.org) was chosen because it is a specified query
language with independent implementations, not a subset of Python: it can
select, filter, compare and reshape JSON, and it has no way to reach an
attribute, a module or the outside world. Evaluation is a pure function of
the expression and the data, so replaying a run gives the same values.

Three decisions on top of the library:

- Function names and arities are checked when an expression is compiled, so a
  typo (`lenght(items)`) is a validation error of the definition, not a
  failure in the middle of a run.
- A condition (`when`) holds by JMESPath's truthiness: `null`, `false`, `""`,
  `[]` and `{}` are false, everything else (including `0`) is true.
- A mapping (the `input` of a step, the `body` of an HTTP call) is an object
  of name -> value, where a string is an expression and `{"literal": X}`
  stands for X itself (`{"literal": "EUR"}` is the string "EUR").
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import jmespath
import jmespath.exceptions
import jmespath.functions
import jmespath.parser

__all__ = [
    "LITERAL_KEY",
    "Expression",
    "ExpressionError",
    "assign",
    "compile_expression",
    "evaluate_mapping",
    "is_literal",
    "is_truthy",
    "parse_output_path",
]

LITERAL_KEY = "literal"
MAX_EXPRESSION_LENGTH = 1000

_OUTPUT_PATH = re.compile(r"^\$(\.[A-Za-z_][A-Za-z0-9_]*)+$")


class ExpressionError(ValueError):
    """An expression does not compile, or cannot be evaluated on this data."""


@dataclass(frozen=True)
class Expression:
    """A compiled JMESPath expression."""

    text: str
    _parsed: jmespath.parser.ParsedResult = field(repr=False, compare=False)

    def evaluate(self, data: Any) -> Any:
        """The value of the expression over `data` (JSON values only)."""
        try:
            return self._parsed.search(data)
        except jmespath.exceptions.JMESPathError as exc:
            raise ExpressionError(f"expression {self.text!r} failed: {exc}") from None

    def holds(self, data: Any) -> bool:
        """Whether the expression, used as a condition, is true over `data`."""
        return is_truthy(self.evaluate(data))


def compile_expression(text: str) -> Expression:
    """Compile `text`, or raise `ExpressionError` saying what is wrong with it."""
    if not isinstance(text, str):
        raise ExpressionError(f"an expression is a string, not {type(text).__name__}")
    if not text.strip():
        raise ExpressionError("an expression cannot be empty")
    if len(text) > MAX_EXPRESSION_LENGTH:
        raise ExpressionError(f"an expression is at most {MAX_EXPRESSION_LENGTH} characters")
    try:
        parsed = jmespath.compile(text)
    except jmespath.exceptions.JMESPathError as exc:
        raise ExpressionError(f"invalid expression {text!r}: {_describe(exc)}") from None
    _check_functions(parsed.parsed, text)
    return Expression(text, parsed)


def _describe(exc: jmespath.exceptions.JMESPathError) -> str:
    # The library's own message spans lines (it draws a caret under the text);
    # one line reads better in a list of problems.
    if isinstance(exc, jmespath.exceptions.IncompleteExpressionError):
        return "it ends too soon"
    if isinstance(exc, jmespath.exceptions.LexerError):
        return f"{exc.message} at character {exc.lexer_position + 1}"
    if isinstance(exc, jmespath.exceptions.ParseError):
        what = f"unexpected {exc.token_value!r}" if exc.msg == "invalid token" else exc.msg
        return f"{what} at character {exc.lex_position + 1}"
    return " ".join(str(exc).split())


def _check_functions(node: Mapping[str, Any], text: str) -> None:
    table: Mapping[str, Any] = jmespath.functions.Functions.FUNCTION_TABLE
    if node.get("type") == "function_expression":
        name = node["value"]
        spec = table.get(name)
        if spec is None:
            raise ExpressionError(f"invalid expression {text!r}: unknown function {name}()")
        signature = spec["signature"]
        given = len(node["children"])
        variadic = bool(signature) and signature[-1].get("variadic", False)
        if (variadic and given < len(signature)) or (not variadic and given != len(signature)):
            expected = f"at least {len(signature)}" if variadic else str(len(signature))
            raise ExpressionError(
                f"invalid expression {text!r}: {name}() takes {expected} arguments, not {given}"
            )
    for child in node.get("children", ()):
        if isinstance(child, Mapping):
            _check_functions(child, text)


def is_truthy(value: Any) -> bool:
    """JMESPath's truthiness: null, false and empty strings/arrays/objects are false."""
    if value is None or value is False:
        return False
    if isinstance(value, str | list | dict):
        return len(value) > 0
    return True


def is_literal(value: Any) -> bool:
    """Whether a mapping value is the `{"literal": X}` escape."""
    return isinstance(value, Mapping) and set(value) == {LITERAL_KEY}


def evaluate_mapping(mapping: Mapping[str, Any], data: Any) -> dict[str, Any]:
    """Evaluate every value of a mapping over `data` (literals stand for themselves)."""
    result: dict[str, Any] = {}
    for name, value in mapping.items():
        if is_literal(value):
            result[name] = value[LITERAL_KEY]
        else:
            result[name] = compile_expression(value).evaluate(data)
    return result


def parse_output_path(path: str) -> tuple[str, ...]:
    """The field names of an output location such as `$.payment.receipt`."""
    if not isinstance(path, str) or not _OUTPUT_PATH.match(path):
        raise ExpressionError(
            f"an output location looks like '$.name' or '$.name.field', not {path!r}"
        )
    return tuple(path.split(".")[1:])


def assign(data: Mapping[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of `data` with `value` stored at the output location `path`.

    Objects along the way are copied, not changed; a non-object in the way is
    replaced by an object.
    """
    names = parse_output_path(path)
    root = dict(data)
    node = root
    for name in names[:-1]:
        child = node.get(name)
        child = dict(child) if isinstance(child, Mapping) else {}
        node[name] = child
        node = child
    node[names[-1]] = value
    return root
