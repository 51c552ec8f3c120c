"""The `signal`, `query` and `update` calls of `AsyncEngine` (thin methods over the one door)."""

from __future__ import annotations

import contextlib
import uuid
from typing import Any

from waypost.engine.runner import Runner
from waypost.errors import UpdateFailed, UpdateTimeout
from waypost.features.definitions import Definitions
from waypost.model import operations as ops

from .door import LocalDoor
from .handles import UpdateHandle

ACCEPTED_WAIT = 0.001
"""How long `start_update` waits past the update's acceptance for its result."""


class UpdateCalls:
    """Signals, queries and updates of runs, as the embedded API's local principal."""

    _local: LocalDoor  # the engine's door, as its local principal in a tenant

    _runner: Runner
    _definitions: Definitions

    async def signal(
        self, run_id: str, name: str, payload: Any = None, *, tenant: str = "default"
    ) -> None:
        """Deliver a signal; the run sees it at its next wait for `name`."""
        await self._local(ops.Signal(run_id=run_id, signal=name, payload=payload), tenant)

    async def query(self, run_id: str, name: str, *args: Any, tenant: str = "default") -> Any:
        """What the query handler `name` of run `run_id`'s code (`ctx.set_query`) answers
        for `args`. The run's code is replayed from its history for it, in this engine;
        nothing is recorded. Finished runs answer too. An unknown query, a handler that
        raises or tries to act (sleep, run an activity): `QueryFailed`. Reader."""
        return await self._local(ops.Query(run_id=run_id, query=name, args=args), tenant)

    async def update(
        self,
        run_id: str,
        name: str,
        *args: Any,
        update_id: str | None = None,
        timeout: float = 60.0,
        tenant: str = "default",
    ) -> Any:
        """Send update `name` with `args` to run `run_id` and wait (at most `timeout`
        seconds) for what its handler (`ctx.set_update`) returns.

        The update's validator runs first against the run's current state: a refusal
        is `UpdateRejected` and nothing is recorded. Accepted, it is recorded
        (UpdateAccepted) and survives crashes; its handler runs in the workflow and its
        result is recorded (UpdateCompleted). `update_id` (one is made if None)
        deduplicates: the same id again answers the first update's result, it never
        runs twice. A handler that raises: `UpdateFailed`. Not done within `timeout`:
        `UpdateTimeout` (the update goes on; ask again with its id). Starter, operator.
        """
        request = ops.Update(
            run_id=run_id, update=name, args=args, update_id=update_id, timeout=timeout
        )
        answer: ops.UpdateAnswer = await self._local(request, tenant)
        return answer.result

    async def start_update(
        self,
        run_id: str,
        name: str,
        *args: Any,
        update_id: str | None = None,
        tenant: str = "default",
    ) -> UpdateHandle:
        """Send update `name` with `args` to run `run_id` and return once the run has
        accepted it (its validator passed and it is recorded, so it survives crashes), not
        when it completes: `await handle.result(timeout=)` waits for that. A refusal is
        `UpdateRejected` here; a handler that raises is `UpdateFailed` from `result()`.
        `update_id` deduplicates as for `update`. Starter, operator."""
        return await accept_update(self, run_id, name, args, update_id, tenant)


async def accept_update(
    engine: Any,
    run_id: str,
    name: str,
    args: tuple[Any, ...],
    update_id: str | None,
    tenant: str | None,
) -> UpdateHandle:
    """`start_update` by `engine`'s `update` (an engine's, or a remote client's: `tenant`
    None)."""
    update_id = update_id or f"upd-{uuid.uuid4().hex}"
    where = {} if tenant is None else {"tenant": tenant}
    # Accepted by the time it times out or fails: what became of it is for `result()`.
    with contextlib.suppress(UpdateTimeout, UpdateFailed):
        await engine.update(
            run_id, name, *args, update_id=update_id, timeout=ACCEPTED_WAIT, **where
        )
    return UpdateHandle(run_id, update_id, name, tenant, engine)
