"""The remote client's calls made from the engine's: one method, two ways to send it.

An engine call builds its request and hands it to `self._local(request, tenant)`.
`remote_twin(EngineCalls.pause)` is the same call on `AsyncClient`, without `tenant=`
(the API key decides it): the engine's method body runs with a `_local` that sends
the request over its route: a derived one (`AsyncClient.execute`), or the one written by
hand that its wire (`remote_wire.Wire`) takes. The answer, the checks before anything is
sent and the errors are the engine's.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

from waypost.model.requests import Request

P = ParamSpec("P")
T = TypeVar("T")


class Executes(Protocol):
    async def _carry(self, request: Request[Any]) -> Any: ...


class _Sent:
    """What an engine call's body sees as `self` on a remote client."""

    def __init__(self, client: Executes) -> None:
        self._client = client

    async def _local(self, request: Request[T], tenant: str) -> T:
        answer: T = await self._client._carry(request)
        return answer


def remote_twin(
    method: Callable[Concatenate[Any, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[Any, P], Coroutine[Any, Any, T]]:
    """The remote client's method of the engine call `method` (same parameters but
    `tenant`, same docstring, same answer)."""
    name = method.__name__

    async def call(self: Executes, /, *args: P.args, **kwargs: P.kwargs) -> T:
        if "tenant" in kwargs:
            raise TypeError(f"{name}() of a remote client takes no tenant: its API key decides it")
        return await method(_Sent(self), *args, **kwargs)

    functools.update_wrapper(call, method)
    signature = inspect.signature(method)
    call.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[p for p in signature.parameters.values() if p.name != "tenant"]
    )
    return call
