"""Workflows written as classes: the run's state on an object, its handlers as methods.

    @wp.workflow(name="cart")
    class Cart:
        def __init__(self) -> None:
            self.items: list[str] = []

        @wp.signal("add")
        def add(self, item: str) -> None:
            self.items.append(item)

        @wp.query()
        def count(self) -> int:
            return len(self.items)

        @wp.update()
        def remove(self, item: str) -> int: ...

        @remove.validator
        def _known(self, item: str) -> None: ...

        async def run(self, ctx: wp.WorkflowContext, owner: str) -> list[str]: ...

Each run gets a new object (`cls()`, no arguments) and its handlers are registered, as
`ctx.on_signal`, `ctx.set_query` and `ctx.set_update` would, before `run` starts: the
same on every replay. The closures style and this one are the same underneath.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from waypost.errors import ConfigurationError

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class HandlerMark:
    """What a method handles: a signal, query or update of `name`."""

    kind: str  # "signal", "query" or "update"
    name: str
    validator: str | None = None  # an update's validator: the name of a method


def _marker(kind: str, name: str | None) -> Callable[[F], F]:
    if name is not None and (not isinstance(name, str) or not name):
        raise ConfigurationError(f"a {kind} handler's name must be a non-empty string")

    def mark(fn: F) -> F:
        if not callable(fn):
            raise ConfigurationError(f"@wp.{kind} marks a method, not {fn!r}")
        fn.__waypost_handler__ = HandlerMark(kind, name or fn.__name__)  # type: ignore[attr-defined]
        if kind == "update":

            def validator(check: Callable[..., Any]) -> Callable[..., Any]:
                mark = fn.__waypost_handler__  # type: ignore[attr-defined]
                fn.__waypost_handler__ = replace(mark, validator=check.__name__)  # type: ignore[attr-defined]
                return check

            fn.validator = validator  # type: ignore[attr-defined]
        return fn

    return mark


def signal(name: str | None = None) -> Callable[[F], F]:
    """Mark a method of a workflow class as the handler of signal `name` (the method's
    name by default), as `ctx.on_signal` registers one: called with each signal's payload,
    earlier ones included; an `async def` one runs as part of the run."""
    return _marker("signal", name)


def query(name: str | None = None) -> Callable[[F], F]:
    """Mark a method of a workflow class as the answer to query `name` (the method's name
    by default), as `ctx.set_query` registers one."""
    return _marker("query", name)


def update(name: str | None = None) -> Callable[[F], F]:
    """Mark a method of a workflow class as the handler of update `name` (the method's name
    by default), as `ctx.set_update` registers one; `@method.validator` marks another method
    as its validator."""
    return _marker("update", name)


@dataclass(frozen=True)
class ClassWorkflow:
    """A workflow class made into what the registry runs: `entry(ctx[, input])`."""

    entry: Callable[..., Any]
    input_hint: Any
    result_hint: Any
    takes_input: bool


def class_workflow(cls: type) -> ClassWorkflow:
    """The entry of workflow class `cls`: a new object, its handlers registered, its `run`."""
    where = f"workflow class {cls.__qualname__}"
    run = cls.__dict__.get("run") or getattr(cls, "run", None)
    if run is None or not inspect.iscoroutinefunction(run):
        raise ConfigurationError(f"{where} needs an 'async def run(self, ctx[, input])'")
    params = list(inspect.signature(run).parameters.values())[2:]
    if len(params) > 1:
        raise ConfigurationError(f"{where}: run takes (self, ctx, input): one input at most")
    try:
        hints = typing.get_type_hints(run)
    except Exception:
        hints = {}
    try:
        inspect.signature(cls).bind()
    except TypeError:
        raise ConfigurationError(f"{where} must be made with no arguments: cls()") from None
    marks: list[tuple[str, HandlerMark]] = []
    for attr in dir(cls):
        mark = getattr(getattr(cls, attr, None), "__waypost_handler__", None)
        if isinstance(mark, HandlerMark):
            if mark.validator is not None and not callable(getattr(cls, mark.validator, None)):
                raise ConfigurationError(f"{where}: no validator method {mark.validator!r}")
            marks.append((attr, mark))

    def begin(ctx: Any) -> Any:
        obj = cls()
        for attr, mark in marks:
            method = getattr(obj, attr)
            if mark.kind == "signal":
                ctx.on_signal(mark.name, method)
            elif mark.kind == "query":
                ctx.set_query(mark.name, method)
            else:
                check = getattr(obj, mark.validator) if mark.validator else None
                ctx.set_update(mark.name, method, validator=check)
        return obj

    async def entry(ctx: Any, *given: Any) -> Any:
        return await begin(ctx).run(ctx, *given)

    entry.__name__ = entry.__qualname__ = cls.__name__
    entry.__module__ = cls.__module__
    return ClassWorkflow(
        entry=entry,
        input_hint=hints.get(params[0].name, Any) if params else Any,
        result_hint=hints.get("return", Any),
        takes_input=bool(params),
    )
