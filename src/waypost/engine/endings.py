"""Who waits for a run to end in this process (`result()`, an update's caller).

A waiter is a future per caller, set when this engine sees the run end; callers
also look at the store when their wait runs out, so a run ended by another
process is found within their own backoff.
"""

from __future__ import annotations

import asyncio
import contextlib

RunKey = tuple[str, str]


class RunEnds:
    """The futures of the callers waiting for runs of this engine to end."""

    def __init__(self) -> None:
        self._waiters: dict[RunKey, list[asyncio.Future[None]]] = {}

    def ended(self, tenant: str, run_id: str) -> None:
        """Wake every caller waiting for the run."""
        for fut in self._waiters.pop((tenant, run_id), []):
            if not fut.done():
                fut.set_result(None)

    async def wait(self, tenant: str, run_id: str, seconds: float) -> None:
        """Return when the run ends here, or after `seconds`."""
        key = (tenant, run_id)
        fut = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(key, []).append(fut)
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(seconds):  # not wait_for: see Scheduler._sleep
                    await fut
        finally:
            waiters = self._waiters.get(key)
            if waiters is not None and fut in waiters:
                waiters.remove(fut)
                if not waiters:
                    del self._waiters[key]
