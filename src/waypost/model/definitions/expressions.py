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
- Evaluation has a `Budget`, enforced while it runs, never after: every node
  the interpreter visits (each element of a projection counts) is a step, and
  every value it builds (a list, an object, a projection, a slice, a
  function's result) is measured as the JSON it would become, shared parts
  counted each time they appear. `[@, @] | [@, @] | ...` doubles its value at
  each step while sharing it in memory, and would only blow up when stored;
  measured this way it is stopped as soon as it passes the budget. The budget
  counts work rather than time, so replaying a run decides the same way on
  any machine. Reading data that is already there is not building it: `blob`
  hands back the stored value whatever its size.
- An expression nests at most `MAX_EXPRESSION_DEPTH` levels (its syntax tree,
  a literal's JSON included), so evaluating it never runs out of stack.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import jmespath
import jmespath.exceptions
import jmespath.functions
import jmespath.parser
import jmespath.visitor

__all__ = [
    "DEFAULT_BUDGET",
    "LITERAL_KEY",
    "MAX_EXPRESSION_DEPTH",
    "Budget",
    "Expression",
    "ExpressionError",
    "Meter",
    "RunBudgetSpent",
    "assign",
    "compile_expression",
    "evaluate_mapping",
    "is_literal",
    "is_truthy",
    "parse_output_path",
]

LITERAL_KEY = "literal"
MAX_EXPRESSION_LENGTH = 1000
MAX_EXPRESSION_DEPTH = 64
"""How deep an expression's syntax tree (and a literal's JSON in it) may nest."""

_OUTPUT_PATH = re.compile(r"^\$(\.[A-Za-z_][A-Za-z0-9_]*)+$")


class ExpressionError(ValueError):
    """An expression does not compile, or cannot be evaluated on this data."""


@dataclass(frozen=True)
class Budget:
    """How much one evaluation may do: steps (nodes visited) and the size of what it builds.

    `max_size` is in characters of the JSON a built value would become. A
    tenant's `Limits.expression_budget()` gives its budget; the defaults are
    those of `Limits()`.
    """

    max_steps: int = 100_000
    max_size: int = 1_000_000

    def __post_init__(self) -> None:
        for name in ("max_steps", "max_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"Budget.{name} must be a positive integer, got {value!r}")


DEFAULT_BUDGET = Budget()


@dataclass
class Meter:
    """What all the evaluations of one run have done, against the run's totals.

    Each evaluation has its own `Budget`; a run's evaluations together are bounded too
    (`max_run_expression_steps`, `max_run_expression_size` of `Limits`), so that a
    definition cannot make its run, a replay of it, or a query of it cost more than
    those totals whatever it loops over. The totals count the same work the budget
    does, in the order the run evaluates, so a replay stops at the same expression.
    """

    max_steps: int
    max_size: int
    steps: int = 0
    size: int = 0


class RunBudgetSpent(ExpressionError):
    """The run's expressions together went past the run's totals (see `Meter`)."""


class _OverBudget(Exception):
    """An evaluation went past its budget (said as an ExpressionError by `evaluate`)."""


class _RunOverBudget(_OverBudget):
    """The run's evaluations together went past its totals (said as `RunBudgetSpent`)."""


@dataclass(frozen=True)
class Expression:
    """A compiled JMESPath expression."""

    text: str
    _parsed: jmespath.parser.ParsedResult = field(repr=False, compare=False)

    def evaluate(
        self, data: Any, budget: Budget = DEFAULT_BUDGET, meter: Meter | None = None
    ) -> Any:
        """The value of the expression over `data` (JSON values only), within `budget`
        and, with a `meter`, within what is left of its run's totals."""
        try:
            return _Evaluation(budget, meter).visit(self._parsed.parsed, data)
        except _RunOverBudget as exc:
            raise RunBudgetSpent(f"expression {self.text!r} was stopped: {exc}") from None
        except _OverBudget as exc:
            raise ExpressionError(f"expression {self.text!r} was stopped: {exc}") from None
        except jmespath.exceptions.JMESPathError as exc:
            raise ExpressionError(f"expression {self.text!r} failed: {exc}") from None
        except RecursionError:
            raise ExpressionError(
                f"expression {self.text!r} failed: the data is nested too deeply"
            ) from None
        except (ArithmeticError, TypeError, ValueError) as exc:
            # A function given what it cannot take (ceil of an infinite number, ...).
            raise ExpressionError(
                f"expression {self.text!r} failed: {type(exc).__name__}: {exc}"
            ) from None

    def holds(self, data: Any, budget: Budget = DEFAULT_BUDGET, meter: Meter | None = None) -> bool:
        """Whether the expression, used as a condition, is true over `data`."""
        return is_truthy(self.evaluate(data, budget, meter))


_MAX_INT_BITS = 997  # 2**997 has 301 digits

# Nodes whose value the evaluation builds (rather than reads from the data or the text).
_BUILDS = frozenset(
    {
        "multi_select_list",
        "multi_select_dict",
        "projection",
        "value_projection",
        "filter_projection",
        "flatten",
        "slice",
        "function_expression",
    }
)


class _Evaluation(jmespath.visitor.TreeInterpreter):
    """JMESPath's own interpreter, counting its steps and measuring what it builds."""

    def __init__(self, budget: Budget, meter: Meter | None = None) -> None:
        super().__init__()
        self.budget = budget
        self.meter = meter
        self.steps = 0
        # id -> (value, size) of the lists and objects measured so far; the value
        # is kept so that its id cannot be reused during the evaluation.
        self.sizes: dict[int, tuple[Any, int]] = {}

    def visit(self, node: Any, *args: Any, **kwargs: Any) -> Any:
        self.steps += 1
        if self.steps > self.budget.max_steps:
            raise _OverBudget(
                f"it took more than {self.budget.max_steps} steps (max_expression_steps)"
            )
        meter = self.meter
        if meter is not None:
            meter.steps += 1
            if meter.steps > meter.max_steps:
                raise _RunOverBudget(
                    f"the run's expressions took more than {meter.max_steps} steps in all "
                    "(max_run_expression_steps)"
                )
        result = super().visit(node, *args, **kwargs)
        if node["type"] in _BUILDS:
            size = self.measure(result)
            if meter is not None:
                meter.size += size
                if meter.size > meter.max_size:
                    raise _RunOverBudget(
                        f"the run's expressions built more than {meter.max_size} characters "
                        "of JSON in all (max_run_expression_size)"
                    )
        return result

    def measure(self, value: Any) -> int:
        """The size of `value` as JSON, stopping as soon as it is over the budget."""
        if not isinstance(value, list | dict):
            return self.within(_scalar_size(value))
        known = self.sizes.get(id(value))
        if known is not None:
            return known[1]
        # Depth first without recursion; each list or object is measured once.
        frames: list[list[Any]] = [[value, _parts(value), 2]]
        while frames:
            frame = frames[-1]
            total: int = frame[2]
            deeper = None
            for extra, child in frame[1]:
                total += extra
                if isinstance(child, list | dict):
                    known = self.sizes.get(id(child))
                    if known is None:
                        deeper = child
                        break
                    total += known[1]
                else:
                    total += _scalar_size(child)
                self.within(total)
            frame[2] = self.within(total)
            if deeper is not None:
                frames.append([deeper, _parts(deeper), 2])
                continue
            frames.pop()
            self.sizes[id(frame[0])] = (frame[0], total)
            if frames:
                frames[-1][2] = self.within(frames[-1][2] + total)
        return self.sizes[id(value)][1]

    def within(self, size: int) -> int:
        if size > self.budget.max_size:
            raise _OverBudget(
                f"it built a value larger than {self.budget.max_size} characters of JSON "
                "(max_expression_size)"
            )
        return size


def _parts(value: list[Any] | dict[str, Any]) -> Iterator[tuple[int, Any]]:
    """(characters around it, item) for each item of a list or object, as JSON has them."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield len(key) + 4, item  # the quoted key, its colon and a comma
    else:
        for item in value:
            yield 1, item


def _scalar_size(value: Any) -> int:
    if isinstance(value, str):
        return len(value) + 2
    if isinstance(value, float) and not math.isfinite(value):
        raise jmespath.exceptions.JMESPathError(
            f"it gave the number {value}, which JSON cannot hold"
        )
    if isinstance(value, int) and value.bit_length() > _MAX_INT_BITS:
        # Python writes at most 4300 digits of an integer; far fewer mean nothing as data.
        raise jmespath.exceptions.JMESPathError("it gave an integer of more than 300 digits")
    return 5  # null, true, false and numbers: a few characters


def compile_expression(text: str) -> Expression:
    """Compile `text`, or raise `ExpressionError` saying what is wrong with it."""
    if not isinstance(text, str):
        raise ExpressionError(f"an expression is a string, not {type(text).__name__}")
    if not text.strip():
        raise ExpressionError("an expression cannot be empty")
    if len(text) > MAX_EXPRESSION_LENGTH:
        raise ExpressionError(f"an expression is at most {MAX_EXPRESSION_LENGTH} characters")
    too_deep = f"invalid expression: it is nested more than {MAX_EXPRESSION_DEPTH} levels deep"
    try:
        parsed = jmespath.compile(text)
    except jmespath.exceptions.JMESPathError as exc:
        raise ExpressionError(f"invalid expression {text!r}: {_describe(exc)}") from None
    except RecursionError:
        raise ExpressionError(too_deep) from None
    except ValueError as exc:  # a literal JSON cannot hold (an integer of 5000 digits)
        raise ExpressionError(f"invalid expression: {exc}") from None
    if _depth(parsed.parsed) > MAX_EXPRESSION_DEPTH:
        raise ExpressionError(too_deep)
    _check_functions(parsed.parsed, text)
    return Expression(text, parsed)


def _depth(tree: Mapping[str, Any]) -> int:
    """How deep a syntax tree nests, the JSON of its literals included (without recursion)."""
    deepest = 0
    todo: list[tuple[Any, int]] = [(tree, 1)]
    while todo:
        node, depth = todo.pop()
        deepest = max(deepest, depth)
        if deepest > MAX_EXPRESSION_DEPTH:
            break
        children: list[Any] = []
        if isinstance(node, list):
            children = node
        elif isinstance(node, Mapping) and isinstance(node.get("type"), str):
            children = [c for c in node.get("children", ()) if isinstance(c, Mapping)]
            if node["type"] == "literal":
                children.append(node.get("value"))
        elif isinstance(node, Mapping):  # an object inside a literal
            children = list(node.values())
        todo.extend((child, depth + 1) for child in children)
    return deepest


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


def evaluate_mapping(
    mapping: Mapping[str, Any],
    data: Any,
    budget: Budget = DEFAULT_BUDGET,
    meter: Meter | None = None,
) -> dict[str, Any]:
    """Evaluate every value of a mapping over `data` (literals stand for themselves).

    Each expression has `budget` to itself.
    """
    result: dict[str, Any] = {}
    for name, value in mapping.items():
        if is_literal(value):
            result[name] = value[LITERAL_KEY]
        else:
            result[name] = compile_expression(value).evaluate(data, budget, meter)
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
