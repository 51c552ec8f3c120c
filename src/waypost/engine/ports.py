"""What the machinery offers the features built on it, and what it asks of them.

Features (approvals, definitions, the run operations) depend on `Machinery`,
never on the engine object that implements it or on its private members. The
machinery in turn knows features only through `WorkflowSource`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

from waypost.model.codec import Codec
from waypost.model.events import Event
from waypost.runtime.instance import WorkflowInstance
from waypost.runtime.registry import Registry, WorkflowDefn
from waypost.store.base import CommitResult, RunCommit, RunRecord, Store

from .compute import ComputeLane
from .quotas import QuotaBook
from .settings import Settings
from .starts import Starts, StartSignal as StartSignal

P = ParamSpec("P")
T = TypeVar("T")


def declared_by(
    method: Callable[Concatenate[Any, P], T],
) -> Callable[[Callable[..., Any]], Callable[Concatenate[Any, P], T]]:
    """Declare the decorated Protocol method with the parameters and result of `method`,
    the one that does it (they are written once, there); it keeps its own docstring."""

    def declare(declared: Callable[..., Any]) -> Callable[Concatenate[Any, P], T]:
        declared.__wrapped__ = method  # type: ignore[attr-defined]
        return declared

    return declare


class WorkflowSource(Protocol):
    """Finds the code of runs whose workflow no registered function is (definition runs)."""

    async def workflow_for(self, run: RunRecord, history: Sequence[Event]) -> WorkflowDefn | None:
        """The workflow to replay `run` with, or None if this source does not know it.

        Raises if the run's code cannot be loaded (the run is then suspended).
        """
        ...


class Machinery(Protocol):
    """The part of an engine that moves runs, as features see it."""

    @property
    def settings(self) -> Settings: ...

    @property
    def store(self) -> Store: ...

    @property
    def registry(self) -> Registry: ...

    @property
    def codec(self) -> Codec: ...

    @property
    def compute(self) -> ComputeLane:
        """Where work a tenant can make expensive runs: off the loop, timed, fairly."""
        ...

    @property
    def quotas(self) -> QuotaBook:
        """Each tenant's effective quotas, kept briefly."""
        ...

    def serves_workflow(self, queue: str) -> bool:
        """Whether this engine is serving and runs workflow tasks of `queue`."""
        ...

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Run `coro` in the background; it is cancelled when the engine closes."""
        ...

    def wake_scheduler(self) -> None:
        """Look for claimable work now (something became ready)."""
        ...

    async def commit(self, commit: RunCommit) -> CommitResult:
        """Commit one change of one run (at the engine's fault points)."""
        ...

    async def commit_and_wake(self, commit: RunCommit) -> CommitResult:
        """Commit events from outside the workflow code, and have the run process them."""
        ...

    @declared_by(Starts.start_run)
    async def start_run(self, *args: Any, **kwargs: Any) -> Any:
        """Create a run (or find the same one again) and start processing it; its id and
        whether this call created it. With `signal`, a run that has the id gets the signal
        (whatever its input) instead of being found again, in the same transaction. Over a
        start quota of the tenant: `QuotaExceeded`. `history` follows RunStarted (a fork's
        copied events), replayed up to `processed_seq`. With `run_queue`, the run is
        `enqueued` until that workflow queue's limits admit it."""
        ...

    def waking(self, commit: RunCommit) -> RunCommit:
        """`commit` set to wake its run as `commit_and_wake` does: claimed for this engine
        if it serves the run's workflow, else made claimable (for commits a feature makes
        through another store verb)."""
        ...

    def woken(self, tenant: str, run_id: str, res: CommitResult) -> None:
        """After a commit made `waking`: process the run here if it claimed the run's
        workflow task, else wake the scheduler."""
        ...

    def forget(self, tenant: str, run_id: str) -> None:
        """Drop the run's cached instance (its history changed behind its back)."""
        ...

    def run_ended(self, tenant: str, run_id: str) -> None:
        """The run finished by a commit made outside its code: wake who waits on it."""
        ...

    def new_instance(self, defn: WorkflowDefn, tenant: str, run_id: str) -> WorkflowInstance:
        """A fresh instance of a workflow's code for a run, not yet fed any event."""
        ...

    async def wait_for_end(self, tenant: str, run_id: str, seconds: float) -> None:
        """Return when this engine ends the run, or after `seconds`."""
        ...
