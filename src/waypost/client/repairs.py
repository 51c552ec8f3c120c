"""The repair commands of `AsyncEngine`: retry, skip, update-input (a mixin of thin
methods over the one door)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from waypost.model import operations as ops

from .blocking import Blocking, blocking
from .door import LocalDoor
from .twins import remote_twin


class RepairCalls:
    """Repairing runs, as the embedded API's local principal."""

    _local: LocalDoor  # the engine's door, as its local principal in a tenant

    async def retry(
        self, run_id: str, reason: str, *, step: str | None = None, tenant: str = "default"
    ) -> None:
        """Re-run a failed run from its failed step: earlier steps' results are kept (not
        run again), the step gets a fresh attempt (numbering goes on) and the run is
        `running` again. `step` (its id, or a definition step's name) must be the step
        that failed the run. Refused (`InvalidState`) when the run has not failed, or its
        code acted on the failure (compensations ran): fork it instead. Operator."""
        await self._local(ops.Retry(run_id=run_id, reason=reason, step=step), tenant)

    async def skip(
        self, run_id: str, step: str, reason: str, *, output: Any = None, tenant: str = "default"
    ) -> None:
        """Mark an activity step skipped: the run goes on as if it had returned `output`.

        The step is the one that failed a failed run (the run goes on, `running`), or one
        waiting or running (its task is removed; a late result is kept only as audit).
        A definition step marked `skippable: true` needs `operator`, any other `admin`."""
        await self._local(ops.Skip(run_id=run_id, step=step, reason=reason, output=output), tenant)

    async def update_input(
        self, run_id: str, data: Mapping[str, Any], reason: str, *, tenant: str = "default"
    ) -> None:
        """Replace fields of the data a waiting definition run's next steps use (the run
        waits at an approval or wait step). Checked against the definition's input
        schema; the old and new values are recorded. Refused for workflow code and for
        runs not waiting. Operator."""
        await self._local(ops.UpdateInput(run_id=run_id, reason=reason, data=dict(data)), tenant)


# The faces of these calls, one line each (as `operator.OperatorBlocking` and the rest).
class RepairBlocking(Blocking):
    retry = blocking(RepairCalls.retry)
    skip = blocking(RepairCalls.skip)
    update_input = blocking(RepairCalls.update_input)


class RepairRemote:
    retry = remote_twin(RepairCalls.retry)
    skip = remote_twin(RepairCalls.skip)
    update_input = remote_twin(RepairCalls.update_input)


class RepairRemoteBlocking(Blocking):
    retry = blocking(RepairRemote.retry)
    skip = blocking(RepairRemote.skip)
    update_input = blocking(RepairRemote.update_input)
