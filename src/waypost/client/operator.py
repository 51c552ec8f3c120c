"""The operator commands of `AsyncEngine` that take only a reason: cancel, terminate,
pause and resume (a mixin of thin methods over the one door)."""

from __future__ import annotations

from waypost.model import operations as ops

from .blocking import Blocking, blocking
from .door import LocalDoor
from .twins import remote_twin


class OperatorCalls:
    """Terminate, pause and resume runs, as the embedded API's local principal."""

    _local: LocalDoor  # the engine's door, as its local principal in a tenant

    async def cancel(self, run_id: str, reason: str, *, tenant: str = "default") -> None:
        """Ask a run to stop: work not started is dropped, the code may clean up, and the
        run ends `cancelled` (within the engine's `cancel_grace`, whatever its code does)."""
        await self._local(ops.Cancel(run_id=run_id, reason=reason), tenant)

    async def terminate(self, run_id: str, reason: str, *, tenant: str = "default") -> None:
        """End a run now, `terminated`: no compensation runs, its timers and approval
        links die, an attempt still running is kept only as audit. Operator."""
        await self._local(ops.Terminate(run_id=run_id, reason=reason), tenant)

    async def pause(self, run_id: str, reason: str, *, tenant: str = "default") -> None:
        """Pause a run: no new work starts; signals and timers are held until `resume`.
        Refused (`InvalidState`) if it is already paused. Operator."""
        await self._local(ops.Pause(run_id=run_id, reason=reason), tenant)

    async def resume(self, run_id: str, reason: str, *, tenant: str = "default") -> None:
        """Resume a paused run (what arrived meanwhile takes effect now) or a suspended one
        (replayed with this engine's code, after a fix). Refused (`InvalidState`) if it
        is neither. Operator."""
        await self._local(ops.Resume(run_id=run_id, reason=reason), tenant)


# The faces of these calls, one line each: the blocking engine's, the remote client's
# (the call made over its derived route) and the blocking client's.
class OperatorBlocking(Blocking):
    cancel = blocking(OperatorCalls.cancel)
    terminate = blocking(OperatorCalls.terminate)
    pause = blocking(OperatorCalls.pause)
    resume = blocking(OperatorCalls.resume)


class OperatorRemote:
    cancel = remote_twin(OperatorCalls.cancel)
    terminate = remote_twin(OperatorCalls.terminate)
    pause = remote_twin(OperatorCalls.pause)
    resume = remote_twin(OperatorCalls.resume)


class OperatorRemoteBlocking(Blocking):
    cancel = blocking(OperatorRemote.cancel)
    terminate = blocking(OperatorRemote.terminate)
    pause = blocking(OperatorRemote.pause)
    resume = blocking(OperatorRemote.resume)
