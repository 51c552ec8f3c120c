"""A store verb declared once: by the transaction function that does it.

Each verb of the `Store` Protocol is a function of `transactions/` run in a transaction:
it takes the function's parameters after the `Tx`, and is awaited for its result.
`verb_of(fn)` declares a Protocol verb with that type, so its parameters are written
once, in the function; `SqlStore` runs the same function (`sqlstore.write`, `read`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, TypeVar

from .tx import Tx

P = ParamSpec("P")
T = TypeVar("T")
Verb = Callable[Concatenate[Any, P], Coroutine[Any, Any, T]]


def verb_of(fn: Callable[Concatenate[Tx, P], T]) -> Callable[[Callable[..., Any]], Verb[P, T]]:
    """Declare the decorated Protocol method as the verb of the transaction function `fn`:
    `fn`'s parameters after the `Tx`, awaited for `fn`'s result. The method keeps its
    name and docstring."""

    def declare(method: Callable[..., Any]) -> Verb[P, T]:
        signature = inspect.signature(fn)
        me = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
        params = [me, *list(signature.parameters.values())[1:]]
        method.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
        return method

    return declare
