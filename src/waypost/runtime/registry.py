"""The `@workflow` and `@activity` decorators and what they register."""

from __future__ import annotations

import functools
import importlib
import inspect
import math
import os
import re
import sys
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar, overload

from waypost.errors import (
    ConfigurationError,
    InvalidRequest,
    UnknownActivity,
    UnknownWorkflow,
    WorkflowError,
)
from waypost.model.identity import preview
from waypost.model.operations_start import run_timeout_seconds
from waypost.model.queues import DEFAULT_QUEUE
from waypost.model.retry import Retry

from .workflow_classes import class_workflow

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_ACTIVITY_TIMEOUT = timedelta(minutes=5)


@dataclass(frozen=True)
class WorkflowDefn:
    name: str
    version: str
    fn: Callable[..., Any]
    input_hint: Any = Any
    result_hint: Any = Any
    takes_input: bool = True
    # Exceptions that fail the run (besides waypost.Failure and an uncaught
    # ActivityError); any other exception from the code suspends it as a bug.
    failure_types: tuple[type[BaseException], ...] = ()
    run_queue: str | None = None  # the workflow queue its runs wait in for admission
    # A definition a tenant wrote (run by the interpreter), not code of this process: its
    # activations run on the engine's compute lane, in the tenant's share.
    tenant_defined: bool = False
    # Seconds after its start when a run ends `failed` (RunTimedOut), unless its start
    # gives its own; None: no limit.
    run_timeout: float | None = None

    @property
    def queue(self) -> str:
        return workflow_queue(self.name, self.version)


@dataclass(frozen=True)
class ActivityDefn:
    name: str
    fn: Callable[..., Any]
    is_async: bool
    retry: Retry = field(default_factory=Retry)
    timeout: timedelta = DEFAULT_ACTIVITY_TIMEOUT
    heartbeat_timeout: timedelta | None = None
    param_hints: tuple[Any, ...] = ()
    kwarg_hints: dict[str, Any] = field(default_factory=dict)
    result_hint: Any = Any
    queue: str = DEFAULT_QUEUE
    schedule_to_close: timedelta | None = None

    @functools.cached_property
    def spec(self) -> dict[str, Any]:
        """The parts of an ActivityScheduled event that are the same for every call."""
        spec: dict[str, Any] = {
            "activity": self.name,
            "retry": self.retry.to_json(),
            "timeout": self.timeout.total_seconds(),
        }
        if self.heartbeat_timeout is not None:
            spec["heartbeat_timeout"] = self.heartbeat_timeout.total_seconds()
        if self.queue != DEFAULT_QUEUE:
            spec["queue"] = self.queue
        if self.schedule_to_close is not None:
            spec["schedule_to_close"] = self.schedule_to_close.total_seconds()
        return spec


def workflow_queue(name: str, version: str) -> str:
    return f"{name}@{version}"


def _hints(fn: Callable[..., Any]) -> tuple[list[Any], dict[str, Any], Any]:
    """Positional parameter hints after the context, keyword hints, and the return hint."""
    try:
        hints = typing.get_type_hints(fn)
    except Exception:
        hints = {}
    params = list(inspect.signature(fn).parameters.values())[1:]
    positional = [
        hints.get(p.name, Any)
        for p in params
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    keywords = {p.name: hints.get(p.name, Any) for p in params}
    return positional, keywords, hints.get("return", Any)


_NAME = re.compile(r"^[A-Za-z0-9_.:\-]{1,200}$")


def _check_name(kind: str, name: str) -> str:
    if not _NAME.match(name):
        raise ConfigurationError(
            f"{kind} name {name!r} is not allowed: use 1-200 letters, digits, '_', '-', '.', ':'"
        )
    return name


@overload
def workflow(fn: F, /) -> F: ...
@overload
def workflow(
    *,
    name: str | None = None,
    version: str = "1",
    failure_types: tuple[type[BaseException], ...] = (),
    queue: str | None = None,
    run_timeout: timedelta | float | None = None,
) -> Callable[[F], F]: ...
def workflow(
    fn: F | None = None,
    /,
    *,
    name: str | None = None,
    version: str = "1",
    failure_types: tuple[type[BaseException], ...] = (),
    queue: str | None = None,
    run_timeout: timedelta | float | None = None,
) -> F | Callable[[F], F]:
    """Mark `async def f(ctx: WorkflowContext, input)` as a workflow (or a class with an
    `async def run(self, ctx, input)` and handler methods: `workflow_classes`).

    `version` tells versions of one workflow apart: a run replays on the
    version it started with, new runs take the newest registered one.

    An exception that escapes the code fails the run only if it is a
    `waypost.Failure`, an `ActivityError` the code did not catch, or an
    instance of one of `failure_types`; any other (a `KeyError`, a
    `TypeError`...) is a bug and suspends the run until the code is fixed and
    the run resumed.

    `queue`: a start that names no queue puts the run in this workflow queue: it is
    `enqueued` until the queue's limits (`configure_queue`) admit it.

    `run_timeout` (a timedelta or seconds): a run that has not ended that long after
    its start ends `failed` with a `RunTimedOut` error, whatever it awaits (a start's
    own `run_timeout` wins). It counts from the first generation's start: a run that
    continues as new keeps its deadline.
    """
    try:
        run_seconds = run_timeout_seconds(run_timeout)
    except InvalidRequest as exc:
        raise ConfigurationError(f"workflow {name or getattr(fn, '__name__', '')}: {exc}") from None
    if queue is not None and (not isinstance(queue, str) or not _NAME.fullmatch(queue)):
        raise ConfigurationError(
            f"workflow queue {queue!r} is not allowed: use 1-200 letters, digits, '_', '-', "
            "'.', ':'"
        )
    for kind in failure_types:
        if not (isinstance(kind, type) and issubclass(kind, BaseException)):
            raise ConfigurationError(
                f"failure_types must hold exception classes, not {preview(kind)}"
            )

    def decorate(f: F) -> F:
        if inspect.isclass(f):  # state on an object, handlers as its methods
            made = class_workflow(f)
            entry, input_hint, result = made.entry, made.input_hint, made.result_hint
            takes_input = made.takes_input
        elif not inspect.iscoroutinefunction(f):
            raise ConfigurationError(
                f"workflow {f.__qualname__} must be an 'async def' function or a class "
                "with an 'async def run(self, ctx[, input])'"
            )
        else:
            positional, _, result = _hints(f)
            if len(positional) > 1:
                raise ConfigurationError(
                    f"workflow {f.__qualname__} must take (ctx, input): one input parameter at most"
                )
            entry, takes_input = f, bool(positional)
            input_hint = positional[0] if positional else Any
        defn = WorkflowDefn(
            name=_check_name("workflow", name or f.__name__),
            version=_check_name("version", str(version)),
            fn=entry,
            input_hint=input_hint,
            result_hint=result,
            takes_input=takes_input,
            failure_types=tuple(failure_types),
            run_queue=queue,
            run_timeout=run_seconds,
        )
        f.__waypost_workflow__ = defn  # type: ignore[attr-defined]
        return f

    return decorate(fn) if fn is not None else decorate


@overload
def activity(fn: F, /) -> F: ...
@overload
def activity(
    *,
    name: str | None = None,
    retry: Retry | None = None,
    timeout: timedelta | float | None = None,
    heartbeat_timeout: timedelta | float | None = None,
    queue: str = DEFAULT_QUEUE,
    schedule_to_close: timedelta | float | None = None,
) -> Callable[[F], F]: ...
def activity(
    fn: F | None = None,
    /,
    *,
    name: str | None = None,
    retry: Retry | None = None,
    timeout: timedelta | float | None = None,
    heartbeat_timeout: timedelta | float | None = None,
    queue: str = DEFAULT_QUEUE,
    schedule_to_close: timedelta | float | None = None,
) -> F | Callable[[F], F]:
    """Mark a function taking `ActivityContext` first as an activity.

    Activities hold the side effects; they run at least once. `timeout` bounds
    one attempt (start to close, default 5 minutes); `heartbeat_timeout`, if
    set, fails an attempt that has not called `ctx.heartbeat()` for that long.
    Its attempts wait in the named `queue`, whose limits (`configure_queue`:
    concurrency, rate) every engine honours when it claims them.
    `schedule_to_close` (a timedelta or seconds; default: none) bounds a step's whole
    time, from when it is scheduled across all its attempts and retry waits: once it
    is reached no further attempt starts (a running one is stopped then) and the step
    fails with a `ScheduleToCloseTimeout` error.
    """
    try:
        close_seconds = (
            None
            if schedule_to_close is None
            else _positive_seconds(schedule_to_close, "schedule_to_close")
        )
    except WorkflowError as exc:
        where = name or getattr(fn, "__qualname__", "")
        raise ConfigurationError(f"activity {where}: {exc}") from None

    def decorate(f: F) -> F:
        if not isinstance(queue, str) or not _NAME.fullmatch(queue):
            raise ConfigurationError(
                f"activity {f.__qualname__}: queue {queue!r} is not allowed: use 1-200 "
                "letters, digits, '_', '-', '.', ':'"
            )
        start_to_close = _duration_of(f, "timeout", timeout)
        heartbeat = _duration_of(f, "heartbeat_timeout", heartbeat_timeout)
        if start_to_close is not None and start_to_close <= timedelta(0):
            raise ConfigurationError(f"activity {f.__qualname__}: timeout must be positive")
        if heartbeat is not None and heartbeat < timedelta(seconds=1):
            raise ConfigurationError(
                f"activity {f.__qualname__}: heartbeat_timeout must be at least 1 second"
            )
        positional, keywords, result = _hints(f)
        defn = ActivityDefn(
            name=_check_name("activity", name or f.__name__),
            fn=f,
            is_async=inspect.iscoroutinefunction(f),
            retry=retry or Retry(),
            timeout=start_to_close or DEFAULT_ACTIVITY_TIMEOUT,
            heartbeat_timeout=heartbeat,
            param_hints=tuple(positional),
            kwarg_hints=keywords,
            result_hint=result,
            queue=queue,
            schedule_to_close=None if close_seconds is None else timedelta(seconds=close_seconds),
        )
        f.__waypost_activity__ = defn  # type: ignore[attr-defined]
        return f

    return decorate(fn) if fn is not None else decorate


def call_options(
    *,
    timeout: timedelta | float | None = None,
    heartbeat_timeout: timedelta | float | None = None,
    retry: Retry | None = None,
    queue: str | None = None,
    schedule_to_close: timedelta | float | None = None,
) -> dict[str, Any]:
    """An activity call's options over the activity's own (`ctx.options`), as the
    scheduled step records them; `WorkflowError` for one that is not allowed."""
    spec: dict[str, Any] = {}
    if timeout is not None:
        seconds = _seconds_of(timeout, "timeout")
        if not 0 < seconds < math.inf:
            raise WorkflowError(f"an activity's timeout must be positive, not {timeout!r}")
        spec["timeout"] = seconds
    if heartbeat_timeout is not None:
        seconds = _seconds_of(heartbeat_timeout, "heartbeat_timeout")
        if not 1 <= seconds < math.inf:
            raise WorkflowError(
                f"an activity's heartbeat_timeout must be at least 1 second, not "
                f"{heartbeat_timeout!r}"
            )
        spec["heartbeat_timeout"] = seconds
    if retry is not None:
        if not isinstance(retry, Retry):
            raise WorkflowError(f"retry must be a waypost.Retry, not {preview(retry)}")
        spec["retry"] = retry.to_json()
    if queue is not None:
        if not isinstance(queue, str) or not _NAME.fullmatch(queue):
            raise WorkflowError(
                f"queue {preview(queue)} is not allowed: use 1-200 letters, digits, '_', "
                "'-', '.', ':'"
            )
        spec["queue"] = queue
    if schedule_to_close is not None:
        spec["schedule_to_close"] = _positive_seconds(schedule_to_close, "schedule_to_close")
    return spec


def _duration_of(f: Callable[..., Any], what: str, duration: Any) -> timedelta | None:
    """An activity decorator's `duration` (a timedelta or seconds) as a timedelta."""
    if duration is None:
        return None
    try:
        seconds = _seconds_of(duration, what)
    except WorkflowError as exc:
        raise ConfigurationError(f"activity {f.__qualname__}: {exc}") from None
    if not math.isfinite(seconds):
        raise ConfigurationError(f"activity {f.__qualname__}: {what} must be finite")
    return timedelta(seconds=seconds)


def _positive_seconds(duration: Any, what: str) -> float:
    """`duration` in seconds if it is positive and finite, else `WorkflowError`."""
    seconds = _seconds_of(duration, what)
    if not 0 < seconds < math.inf:
        raise WorkflowError(
            f"{what} must be a positive, finite duration (a timedelta or seconds), not {duration!r}"
        )
    return seconds


def _seconds_of(duration: Any, what: str) -> float:
    if isinstance(duration, timedelta):
        return duration.total_seconds()
    if isinstance(duration, int | float) and not isinstance(duration, bool):
        return float(duration)
    raise WorkflowError(f"{what} must be a timedelta or a number of seconds, not {duration!r}")


def version_key(version: str) -> tuple[tuple[int, int | str], ...]:
    """Order versions naturally: "2" < "10", "1.9" < "1.10", numbers before words."""
    parts = re.findall(r"\d+|[^\d.\-_]+", version)
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in parts)


class Registry:
    """The workflows (all versions) and activities one engine can run."""

    def __init__(self) -> None:
        self._workflows: dict[str, dict[str, WorkflowDefn]] = {}
        self._activities: dict[str, ActivityDefn] = {}
        self._served: frozenset[str] | None = None  # named queues served; None: all

    def add(self, obj: Any) -> None:
        wf: WorkflowDefn | None = getattr(obj, "__waypost_workflow__", None)
        act: ActivityDefn | None = getattr(obj, "__waypost_activity__", None)
        if wf is None and act is None:
            raise ConfigurationError(
                f"{obj!r} is neither a @workflow nor an @activity; decorate it before registering"
            )
        if wf is not None:
            versions = self._workflows.setdefault(wf.name, {})
            known = versions.get(wf.version)
            if known is not None and known.fn is not wf.fn:
                raise ConfigurationError(
                    f"workflow {wf.name!r} version {wf.version!r} is registered already "
                    f"({known.fn.__module__}.{known.fn.__qualname__})"
                )
            versions[wf.version] = wf
        if act is not None:
            known_act = self._activities.get(act.name)
            if known_act is not None and known_act.fn is not act.fn:
                raise ConfigurationError(
                    f"activity {act.name!r} is registered already "
                    f"({known_act.fn.__module__}.{known_act.fn.__qualname__})"
                )
            self._activities[act.name] = act

    def workflow(self, ref: Any, version: str | None = None) -> WorkflowDefn:
        """The workflow named (or decorated) `ref`: the given version, else the newest."""
        defn: WorkflowDefn | None = getattr(ref, "__waypost_workflow__", None)
        name = defn.name if defn is not None else ref
        if not isinstance(name, str):
            raise UnknownWorkflow(
                f"{preview(ref)} is not a workflow; pass a @workflow function or its name"
            )
        versions = self._workflows.get(name)
        if not versions:
            known = ", ".join(sorted(self._workflows)) or "none"
            raise UnknownWorkflow(
                f"no workflow named {preview(name)} is registered (registered: {known})"
            )
        if version is None:
            if defn is not None and ref is defn.fn:
                version = defn.version
            else:
                version = max(versions, key=version_key)
        found = versions.get(version)
        if found is None:
            raise UnknownWorkflow(
                f"workflow {preview(name)} has no version {preview(version)} registered "
                f"(registered: {', '.join(sorted(versions, key=version_key))})"
            )
        return found

    def has_workflow(self, name: str) -> bool:
        return name in self._workflows

    def workflow_names(self) -> list[str]:
        return sorted(self._workflows)

    def find_workflow(self, name: str, version: str) -> WorkflowDefn | None:
        return self._workflows.get(name, {}).get(version)

    def activity(self, ref: Any) -> ActivityDefn:
        defn: ActivityDefn | None = getattr(ref, "__waypost_activity__", None)
        name = defn.name if defn is not None else ref
        found = self._activities.get(name) if isinstance(name, str) else None
        if found is None:
            known = ", ".join(sorted(self._activities)) or "none"
            raise UnknownActivity(
                f"no activity named {preview(name)} is registered (registered: {known})"
            )
        return found

    def activities(self) -> dict[str, ActivityDefn]:
        return self._activities

    def workflow_queues(self) -> list[str]:
        return sorted(d.queue for versions in self._workflows.values() for d in versions.values())

    def activity_names(self) -> list[str]:
        """The activities this engine takes attempts of: all, or those of the queues it
        serves (`serve_queues`)."""
        if self._served is None:
            return sorted(self._activities)
        return sorted(n for n, a in self._activities.items() if a.queue in self._served)

    def named_queues(self) -> frozenset[str]:
        """The named queues (other than the default) of the activities this engine takes."""
        names = self.activity_names()
        return frozenset(self._activities[n].queue for n in names) - {DEFAULT_QUEUE}

    def serve_queues(self, queues: Iterable[str] | None) -> None:
        """Take attempts only of activities in these named queues (None: of every queue).

        The other activities stay registered: this engine's workflows still call them
        (their attempts wait for an engine that serves their queue).
        """
        if queues is None:
            self._served = None
            return
        served = frozenset(queues)
        for name in served:
            if not isinstance(name, str) or not _NAME.fullmatch(name):
                raise ConfigurationError(
                    f"queue {preview(name)} is not allowed: use 1-200 letters, digits, "
                    "'_', '-', '.', ':'"
                )
        if not served:
            raise ConfigurationError("give at least one queue to serve")
        self._served = served


def items_in_modules(names: list[str] | tuple[str, ...]) -> list[Any]:
    """The `@workflow` and `@activity` functions of the modules `names`, imported as
    `python -m` would find them (the working directory first). A name may be a module
    (`shop`, `app.flows`), a module and one attribute (`app.flows:order`: that
    workflow or activity, or a list of them), or a file (`shop.py`, `src/shop.py`: its
    folder is put first on the import path)."""
    if names and "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    items = []
    for name in names:
        module_name, _, attribute = _module_of(name).partition(":")
        module = _import_app(name, module_name)
        if attribute:
            items.extend(_items_named(name, module, attribute))
            continue
        found = [
            obj
            for obj in vars(module).values()
            if hasattr(obj, "__waypost_workflow__") or hasattr(obj, "__waypost_activity__")
        ]
        if not found:
            raise ConfigurationError(f"module {name!r} defines no @workflow or @activity")
        items.extend(found)
    return items


def _module_of(name: str) -> str:
    """The module name of an app given as a file path (its folder put on the import
    path), or `name` as it is."""
    path, colon, attribute = name.partition(":")
    if not (path.endswith(".py") or os.sep in path or "/" in path):
        return name
    if not os.path.isfile(path):
        raise ConfigurationError(f"cannot import app module {name!r}: no file {path!r}")
    folder = os.path.dirname(os.path.abspath(path))
    if folder not in sys.path:
        sys.path.insert(0, folder)
    return os.path.splitext(os.path.basename(path))[0] + colon + attribute


def _import_app(name: str, module_name: str) -> Any:
    try:
        return importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(
            f"cannot import app module {name!r}: {exc} (give a module importable from "
            f"{os.getcwd()}, like shop or app.flows, or a file like ./shop.py)"
        ) from exc
    except Exception as exc:  # the module itself raised (a syntax error, a bug)
        where = ""
        if isinstance(exc, SyntaxError) and exc.filename:
            where = f" at {os.path.basename(exc.filename)}:{exc.lineno}"
        raise ConfigurationError(
            f"importing app module {name!r} failed: {type(exc).__name__}{where}: {exc}"
        ) from exc


def _items_named(name: str, module: Any, attribute: str) -> list[Any]:
    obj = getattr(module, attribute, None)
    objs = list(obj) if isinstance(obj, list | tuple) else [obj]
    if not objs or not all(
        hasattr(o, "__waypost_workflow__") or hasattr(o, "__waypost_activity__") for o in objs
    ):
        raise ConfigurationError(
            f"{name!r}: {attribute!r} is not a @workflow or @activity (or a list of them)"
        )
    return objs
