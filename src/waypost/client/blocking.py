"""`blocking(AsyncX.method)`: the blocking twin of a coroutine method, run on an
object's own loop (the engine's or the remote client's), with the same parameters
(which mypy sees through `ParamSpec`) and docstring."""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, TypeVar, overload

P = ParamSpec("P")
T = TypeVar("T")
U = TypeVar("U")
A = TypeVar("A")


class Blocking:
    """A synchronous face of an async object `aio`, run on an engine's loop."""

    aio: Any

    # Runs a coroutine on the object's loop and answers what it answers.
    _call: Callable[[Coroutine[Any, Any, Any]], Any]


@overload
def blocking(
    method: Callable[Concatenate[A, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[Any, P], T]: ...
@overload
def blocking(
    method: Callable[Concatenate[A, P], Coroutine[Any, Any, T]],
    wrap: Callable[[Any, T], U],
) -> Callable[Concatenate[Any, P], U]: ...
def blocking(
    method: Callable[Concatenate[A, P], Coroutine[Any, Any, T]],
    wrap: Callable[[Any, T], Any] | None = None,
) -> Callable[Concatenate[Any, P], Any]:
    """The blocking twin of a coroutine method: same parameters, same docstring.

    `wrap(self, answer)` turns the coroutine's answer into what the blocking
    method returns (an async handle into a blocking one).
    """

    def call(self: Blocking, /, *args: P.args, **kwargs: P.kwargs) -> Any:
        answer = self._call(method(self.aio, *args, **kwargs))
        return answer if wrap is None else wrap(self, answer)

    functools.update_wrapper(call, method)
    return call
