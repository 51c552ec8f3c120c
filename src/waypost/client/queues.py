"""Named queues of `AsyncEngine`: configure their limits, list them (a mixin of thin
methods over the one door)."""

from __future__ import annotations

from waypost.model import operations_queues as oq
from waypost.model.queues import QueueInfo

from .door import LocalDoor


class QueueCalls:
    """Named queues of a tenant, as the embedded API's local principal."""

    _local: LocalDoor  # the engine's door, as its local principal in a tenant

    async def configure_queue(
        self,
        name: str,
        *,
        concurrency: int | str | None = oq.KEEP,
        rate: tuple[int, float] | str | None = oq.KEEP,
        key_concurrency: int | str | None = oq.KEEP,
        worker_concurrency: int | str | None = oq.KEEP,
        tenant: str = "default",
    ) -> QueueInfo:
        """Set the limits of `tenant`'s queue `name` (the queue an `@activity(queue=...)`
        waits in); answers the queue as `queue` does.

        `concurrency`: at most this many of its attempts run at once, across every engine
        and host; `rate`: at most N attempts start per period seconds, `(N, period)`. None
        removes that limit; a limit not given stays as it is. Every engine's next claim
        honours the change. `key_concurrency`: at most this many at once of the runs
        started with one `concurrency_key` (a customer's id, say). `worker_concurrency`:
        at most this many of its attempts held at once by one engine (worker process).
        A queue that runs are started on (`start(..., queue=)`) admits runs under the
        same limits, counted apart from its attempts (decision 0022).
        """
        request = oq.ConfigureQueue(
            queue=name,
            concurrency=concurrency,
            rate=rate,
            key_concurrency=key_concurrency,
            worker_concurrency=worker_concurrency,
        )
        return await self._local(request, tenant)

    async def queues(self, *, tenant: str = "default") -> list[QueueInfo]:
        """`tenant`'s named queues, configured or holding attempts, by name: each one's
        limits, depth (attempts waiting), running count and oldest waiting age."""
        return await self._local(oq.ListQueues(), tenant)

    async def queue(self, name: str, *, tenant: str = "default") -> QueueInfo:
        """One of `tenant`'s named queues (`QueueNotFound` if it has none of that name)."""
        found: list[QueueInfo] = await self._local(oq.ListQueues(queue=name), tenant)
        return found[0]
