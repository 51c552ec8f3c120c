"""Named queues: a tenant's limits on the attempts that wait in each.

The limits live in the database (`Store.configure_queue`), so every engine's
next claim honours a change; the claim itself enforces them (see
`store/transactions/queues.py`). Listing reads what each queue holds now.
"""

from __future__ import annotations

from waypost.engine.ports import Machinery
from waypost.errors import QueueNotFound
from waypost.model import operations_queues as oq
from waypost.model.identity import Principal, preview
from waypost.model.logs import logger
from waypost.model.queues import QueueInfo
from waypost.model.requests import handles

log = logger("waypost.queues")


class Queues:
    """Configures and lists a tenant's named queues."""

    def __init__(self, machinery: Machinery):
        self.machinery = machinery

    @handles(oq.ConfigureQueue)
    async def configure(self, req: oq.ConfigureQueue, principal: Principal) -> QueueInfo:
        changes = {
            k: getattr(req, k)
            for k in ("concurrency", "rate", "key_concurrency", "worker_concurrency")
            if getattr(req, k) != oq.KEEP
        }
        now = self.machinery.settings.clock()
        info = await self.machinery.store.configure_queue(
            principal.tenant,
            req.queue,
            changes,
            now,
            principal.subject,
            self.machinery.settings.quotas,
        )
        log.info(
            "queue %s of tenant %s configured by %s: %s",
            req.queue,
            principal.tenant,
            principal.subject,
            changes,
        )
        self.machinery.wake_scheduler()  # a raised limit may let waiting attempts start
        return info

    @handles(oq.ListQueues)
    async def list_queues(self, req: oq.ListQueues, principal: Principal) -> list[QueueInfo]:
        now = self.machinery.settings.clock()
        found = await self.machinery.store.list_queues(principal.tenant, now, req.queue)
        if req.queue is not None and not found:
            raise QueueNotFound(
                f"tenant {preview(principal.tenant)} has no queue {preview(req.queue)}: none "
                "is configured and no attempt waits in it"
            )
        return found
