"""Queries and updates as workflow code sees them (decision 0020).

The query and update seam of a run: `Handlers`, a part the instance owns, keeps the
handlers the code registers (`ctx.set_query`, `ctx.set_update`) and runs them:

- A query handler is a plain function of the state the code holds. The engine
  answers a query on an instance rebuilt for the purpose (never the one that runs
  the workflow), with the instance read-only: any command the handler tries (a
  sleep, an activity, `ctx.now()`) raises `QueryFailed`, and nothing the instance
  does is committed.
- An update's validator is called the same way, read-only, before the update is
  accepted; what it raises rejects the update.
- An accepted update is an event (UpdateAccepted, seq s) the code is fed like a
  signal: its handler runs in a task of its own whose steps are numbered
  "u<s>.1", "u<s>.2", ... (after the generation's prefix, "2/u<s>.1", in later
  generations of a run continued as new) and whose end is a command at step "u<s>"
  (UpdateCompleted, with the result or the error), matched on replay like any
  other. A handler that raises fails its update, not the run.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from waypost.errors import QueryFailed, UpdateRejected, WorkflowError
from waypost.model.codec import error_to_json
from waypost.model.events import Event, EventType, UpdateAccepted, UpdateCompleted
from waypost.model.identity import check_id, preview

from .bugs import MAX_MESSAGE, bounded
from .continuation import step_prefix
from .port import InstancePort

_E = EventType


class UpdateHandler:
    """An update's handler and its optional validator."""

    __slots__ = ("handler", "validator")

    def __init__(self, handler: Callable[..., Any], validator: Callable[..., Any] | None) -> None:
        self.handler = handler
        self.validator = validator


def _handler_name(name: Any, what: str) -> str:
    if not isinstance(name, str):
        raise WorkflowError(f"a {what} name must be a string, not {preview(name)}")
    try:
        return check_id(name, f"{what} name")
    except Exception as exc:
        raise WorkflowError(str(exc)) from None


class Handlers:
    """The query and update handlers of one run, and the read-only calls that run them."""

    def __init__(self, port: InstancePort) -> None:
        self._port = port
        self._queries: dict[str, Callable[..., Any]] = {}
        self._updates: dict[str, UpdateHandler] = {}
        self.read_only: str | None = None  # what is being answered, while the run must not act

    # == registering ========================================================
    def set_query(self, name: str, handler: Callable[..., Any]) -> None:
        self._port.check_usable()
        if not callable(handler) or inspect.iscoroutinefunction(handler):
            raise WorkflowError(
                f"the handler of query {name!r} must be a plain function (not async): a query "
                "reads the workflow's state, it never waits"
            )
        self._queries[_handler_name(name, "query")] = handler

    def set_update(
        self,
        name: str,
        handler: Callable[..., Any],
        validator: Callable[..., Any] | None = None,
    ) -> None:
        self._port.check_usable()
        if not callable(handler):
            raise WorkflowError(f"the handler of update {name!r} must be a function")
        if validator is not None and (
            not callable(validator) or inspect.iscoroutinefunction(validator)
        ):
            raise WorkflowError(
                f"the validator of update {name!r} must be a plain function (not async)"
            )
        self._updates[_handler_name(name, "update")] = UpdateHandler(handler, validator)

    def refuse_commands(self) -> None:
        """Raise if the instance is answering a query or validating an update."""
        if self.read_only is not None:
            raise QueryFailed(
                f"{self.read_only} may only read the workflow's state: it cannot sleep, run "
                "activities, wait, or record values (ctx.now(), ctx.random(), ctx.uuid())"
            )

    # == read-only calls (on an instance rebuilt to answer) =====================
    def _read_only_call(self, what: str, fn: Callable[..., Any], args: list[Any]) -> Any:
        self.read_only = what
        try:
            value = fn(*args)
        finally:
            self.read_only = None
        if inspect.isawaitable(value):
            if inspect.iscoroutine(value):
                value.close()
            raise QueryFailed(f"{what} returned an awaitable: it must be a plain function")
        return value

    def answer_query(self, name: str, args: list[Any]) -> Any:
        """What query `name` answers from the state the code holds (raises QueryFailed)."""
        fn = self._queries.get(name)
        if fn is None:
            known = ", ".join(sorted(self._queries)) or "none"
            raise QueryFailed(f"the run has no query {name!r} (its queries: {known})")
        what = f"the handler of query {name!r}"
        try:
            return self._read_only_call(what, fn, args)
        except QueryFailed:
            raise
        except Exception as exc:
            raise QueryFailed(
                f"{what} raised {type(exc).__name__}: {bounded(str(exc), MAX_MESSAGE)}"
            ) from exc

    def validate_update(self, name: str, args: list[Any]) -> None:
        """Raise UpdateRejected if the run has no update `name` or its validator refuses."""
        found = self._updates.get(name)
        if found is None:
            known = ", ".join(sorted(self._updates)) or "none"
            raise UpdateRejected(f"the run has no update {name!r} (its updates: {known})")
        if found.validator is None:
            return
        what = f"the validator of update {name!r}"
        try:
            self._read_only_call(what, found.validator, args)
        except QueryFailed as exc:
            raise UpdateRejected(str(exc)) from exc
        except Exception as exc:
            raise UpdateRejected(
                f"update {name!r} rejected: {bounded(str(exc), MAX_MESSAGE) or type(exc).__name__}"
            ) from exc

    # == an accepted update, in the workflow ====================================
    def accept_update(self, ev: Event) -> None:
        """Run the handler of the update `ev` (UpdateAccepted) in a task of its own."""
        accepted = UpdateAccepted.parse(ev)
        name = str(accepted.name)
        step = f"{step_prefix(self._port.generation)}u{ev.seq}"
        found = self._updates.get(name)
        args = self._port.decode(accepted.args or [], Any)
        if found is None:
            # Validated against the same code, so only a changed workflow gets here.
            missing = WorkflowError(f"the run has no update {name!r}")
            self._update_ended(step, accepted, error=missing)
            return

        async def run() -> Any:
            value = found.handler(*args)
            if inspect.isawaitable(value):
                value = await value
            return value

        task: asyncio.Task[Any] = asyncio.Task(run(), loop=self._port.loop, name=f"update:{step}")
        self._port.loop.set_task_path(task, f"{step}.")

        def done(t: asyncio.Task[Any]) -> None:
            if self._port.closed or t.cancelled():
                return  # the run ended first: the update has no result
            exc = t.exception()
            if exc is not None:
                self._update_ended(step, accepted, error=exc)
            else:
                self._update_ended(step, accepted, result=t.result())

        task.add_done_callback(done)

    def _update_ended(
        self,
        step: str,
        accepted: UpdateAccepted,
        *,
        result: Any = None,
        error: BaseException | None = None,
    ) -> None:
        name = str(accepted.name)
        op = f"update {name!r} ended"
        if self._port.match(step, _E.UPDATE_COMPLETED, "update", op, f"update {name}") is not None:
            return
        completed = UpdateCompleted(
            step=step, kind="update", update_id=accepted.update_id, name=name
        )
        if error is None:
            try:
                completed = replace(completed, result=self._port.encode(result))
            except Exception as exc:
                error = exc
        if error is not None:
            err = error_to_json(error)
            err["message"] = bounded(str(err.get("message", "")), MAX_MESSAGE)
            completed = replace(completed, error=err)
        self._port.command(completed)
