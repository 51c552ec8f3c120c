"""Child runs as workflow code sees them: `ctx.start_child` and `ctx.child`.

The child-run seam of a run: `ChildRuns`, a part the instance owns, starts them. Starting
one is a command (ChildStarted, its own step) that names the child's workflow, version,
input, run id and close policy; the engine turns it into the child's run, created in the
same commit (so replay, which matches the recorded command, never starts it twice). The
child's id is the parent's id and the step (`<parent>-<step>`) unless the code gives one;
either way it is recorded, and replay checks the code asks for the same child. The
child's end comes back as an event the store appends to this run's history in the commit
that ends the child (ChildCompleted, ChildFailed), which resolves the handle's result.

Children nest at most `MAX_CHILD_DEPTH` levels: a run that deep cannot start another,
so a workflow (or definition) that starts itself ends instead of filling the database.
"""

from __future__ import annotations

import asyncio
from typing import Any

from waypost.errors import (
    ChildFailed,
    InvalidRequest,
    PayloadError,
    WorkflowError,
)
from waypost.model.events import ChildStarted, Event, EventType
from waypost.model.identity import check_id, preview

from .loop import Pending, call_site
from .port import InstancePort
from .recorded import describe
from .registry import WorkflowDefn, workflow_queue

_E = EventType
MAX_CHILD_DEPTH = 5
CLOSE_POLICIES = ("cancel", "terminate", "abandon")


def child_run_id(parent_run_id: str, step: str) -> str:
    """A child's id when the code gives none: the parent's id and the step, in characters
    a URL path keeps as they are (`order-7-3`; generation 2's step `2/1` gives `-2~1`)."""
    return f"{parent_run_id}-{step.replace('/', '~')}"


class ChildHandle:
    """A child run started by this run: its id, and its result to await."""

    __slots__ = ("_future", "run_id", "step")

    def __init__(self, run_id: str, step: str, future: asyncio.Future[Any]) -> None:
        self.run_id = run_id
        self.step = step
        self._future = future

    def result(self) -> asyncio.Future[Any]:
        """The child's result; raises `ChildFailed` if it ended without one."""
        return self._future

    def __repr__(self) -> str:
        return f"ChildHandle(run_id={self.run_id!r}, step={self.step!r})"


class ChildRuns:
    """The child runs one run started and still waits for."""

    def __init__(self, port: InstancePort) -> None:
        self._port = port
        self._children: dict[str, Pending] = {}

    @property
    def child_depth(self) -> int:
        """How deep this run is among child runs (0: started by a caller, not a run)."""
        parent = self._port.started.get("parent")
        return int(parent.get("depth", 1)) if isinstance(parent, dict) else 0

    def start_child(
        self,
        workflow: Any,
        input: Any,
        *,
        run_id: str | None = None,
        version: str | None = None,
        close: str = "cancel",
        queue: str | None = None,
        definition: dict[str, Any] | None = None,
    ) -> ChildHandle:
        """Start a child run (recorded as ChildStarted); its handle resolves with its end.

        With `definition` (`{name, version (None: the newest), limits}`), the child is a run
        of the tenant's published definition `workflow`: the store picks the version when
        it creates the child, and a definition it does not find fails the child at once.
        """
        self._port.check_usable()
        site = self._port.site_label or call_site()
        if definition is not None:
            name, queue = str(workflow), queue or ""
            version = "" if definition.get("version") is None else str(definition["version"])
        else:
            name, version, queue = self._child_target(workflow, version, queue)
        if close not in CLOSE_POLICIES:
            raise WorkflowError(
                f"close must be one of {', '.join(CLOSE_POLICIES)}, not {preview(close)}"
            )
        if run_id is not None:
            try:
                check_id(run_id, "the child's run_id")
            except InvalidRequest as exc:
                raise WorkflowError(str(exc)) from None
        step = self._port.next_step()
        fut: asyncio.Future[Any] = self._port.loop.create_future()
        child_id = run_id if run_id is not None else child_run_id(self._port.run_id, step)
        op = f"ctx.start_child({name!r})"
        if self.child_depth >= MAX_CHILD_DEPTH:
            # Nothing recorded: the depth comes from RunStarted, so replay decides the same.
            fut.set_exception(self._too_deep(child_id, step))
            return ChildHandle(child_id, step, fut)
        ev = self._port.match(step, _E.CHILD_STARTED, "child", op, site)
        if ev is None:
            try:
                payload = self._port.codec.encode(input)
            except PayloadError as exc:
                raise WorkflowError(f"the input of child {name!r}: {exc}") from None
            started = ChildStarted(
                step=step,
                kind="child",
                workflow=name,
                version=version,
                queue=queue,
                run_id=child_id,
                input=payload,
                close=close,
                depth=self.child_depth + 1,
                site=site,
                definition=definition,
            )
            self._port.command(started)
        elif ((was := ChildStarted.parse(ev)).workflow, was.run_id) != (name, child_id):
            raise self._port.nondeterministic(
                f"history {describe(ev)} does not match the code: the code called {op} at "
                f"{site} (step {step}) for run {child_id!r}, the history started workflow "
                f"{was.workflow!r} as run {was.run_id!r}",
                expected=ev,
                code_did=op,
                site=site,
            )
        self._children[step] = Pending(fut, name, Any, site, child_id)
        return ChildHandle(child_id, step, fut)

    def _too_deep(self, child_id: str, step: str) -> ChildFailed:
        """Why a run `MAX_CHILD_DEPTH` levels deep starts no child."""
        return ChildFailed(
            child_id,
            step,
            "not_started",
            {
                "type": "TooDeep",
                "message": f"run {self._port.run_id!r} is a child {self.child_depth} levels "
                f"deep, the most there may be ({MAX_CHILD_DEPTH}); it cannot start another",
            },
        )

    def _child_target(
        self, workflow: Any, version: str | None, queue: str | None
    ) -> tuple[str, str, str]:
        """The child's workflow name, version and workflow-task queue."""
        defn: WorkflowDefn | None = getattr(workflow, "__waypost_workflow__", None)
        if defn is not None and version is None:
            return defn.name, defn.version, queue or defn.queue
        name = defn.name if defn is not None else workflow
        if not isinstance(name, str):
            raise WorkflowError(
                f"{preview(workflow)} is not a workflow; pass a @workflow function or its name"
            )
        if version is None:
            if self._port.workflows is None:
                raise WorkflowError(f"give the version of child workflow {name!r}")
            try:
                version = self._port.workflows(name, None).version
            except Exception as exc:
                raise WorkflowError(str(exc)) from None
        return name, version, queue or workflow_queue(name, version)

    def child_ended(self, ev: Event) -> None:
        """A child's end (ChildCompleted or ChildFailed) reached this run."""
        d = ev.data
        p = self._children.pop(str(d.get("step")), None)
        if p is None or p.future.done():
            return
        if ev.type == _E.CHILD_COMPLETED:
            try:
                p.future.set_result(self._port.decode(d.get("result"), p.hint))
            except PayloadError as exc:
                p.future.set_exception(exc)
            return
        p.future.set_exception(
            ChildFailed(
                str(d.get("run_id")), str(d.get("step")), str(d.get("status")), d.get("error") or {}
            )
        )

    def child_waits(self) -> list[dict[str, Any]]:
        """What the run waits for in its children, for its snapshot."""
        return [
            {"kind": "child", "step": step, "workflow": p.name, "run_id": p.extra}
            for step, p in self._children.items()
        ]
