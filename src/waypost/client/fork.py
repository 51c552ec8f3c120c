"""The `fork` call of `AsyncEngine` (a mixin of one thin method over the one door)."""

from __future__ import annotations

from waypost.model import operations as ops
from waypost.model.fork import Forked

from .door import LocalDoor


class ForkCalls:
    """Forking runs, as the embedded API's local principal."""

    _local: LocalDoor  # the engine's door, as its local principal in a tenant

    async def fork(
        self,
        run_id: str,
        *,
        reason: str,
        at_step: str | None = None,
        up_to_seq: int | None = None,
        new_run_id: str | None = None,
        tenant: str = "default",
    ) -> Forked:
        """Start a new run from run `run_id`'s history up to a cut, the safe way to redo
        work after a bug: the copied steps' results are reused (not executed again), the
        cut step and everything after it run anew, and the new run is linked to its
        source (`forked_from` in its RunStarted; `RunForked` in an unfinished source).

        `at_step` cuts before that step (a step id such as "3", or a definition step's
        name); `up_to_seq` after that event of the source; neither: after the last event
        that can be copied. Only finished steps are copied; copying stops at an approval
        (the fork asks again), a cancellation request or a migration. The answer's
        `run_id` is the new run (`new_run_id`, or a fresh id). The same id, source and
        cut again answer the same run (`created=False`); another run of that id is
        `RunIdConflict`. A source with an activity step in flight is `InvalidState` (the
        step would run in both runs): fork it once the step has finished. Operator.
        """
        request = ops.Fork(
            run_id=run_id,
            reason=reason,
            at_step=at_step,
            up_to_seq=up_to_seq,
            new_run_id=new_run_id,
        )
        return await self._local(request, tenant)
