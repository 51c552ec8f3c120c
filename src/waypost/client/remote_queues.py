"""The named-queue calls of `AsyncClient`, over `/v1/queues...`: the names, parameters
and answers of the embedded engine's calls, without `tenant=` (the API key decides it)."""

from __future__ import annotations

import dataclasses
from typing import Any

from waypost.model import operations_queues as oq
from waypost.model.queues import QueueInfo

from .door import Sends
from .remote_wire import checked_here, record, segment


class QueueRequests:
    """Named queues of a remote client (operators configure them, readers list them)."""

    _send: Sends  # the JSON answer of a request (an error answer raised as its error)

    async def configure_queue(
        self,
        name: str,
        *,
        concurrency: int | str | None = oq.KEEP,
        rate: tuple[int, float] | str | None = oq.KEEP,
        key_concurrency: int | str | None = oq.KEEP,
        worker_concurrency: int | str | None = oq.KEEP,
    ) -> QueueInfo:
        """Set the limits of the tenant's queue `name`: `concurrency` (attempts at once,
        across every engine), `rate` ((N, period): N starts per period seconds); None
        removes a limit, one not given stays. Operator."""
        asked = checked_here(
            oq.ConfigureQueue(
                queue=name,
                concurrency=concurrency,
                rate=rate,
                key_concurrency=key_concurrency,
                worker_concurrency=worker_concurrency,
            )
        )
        body: dict[str, Any] = {}
        if asked.worker_concurrency != oq.KEEP:
            body["worker_concurrency"] = asked.worker_concurrency
        if asked.key_concurrency != oq.KEEP:
            body["key_concurrency"] = asked.key_concurrency
        if asked.concurrency != oq.KEEP:
            body["concurrency"] = asked.concurrency
        if asked.rate != oq.KEEP:
            body["rate"] = list(asked.rate) if asked.rate is not None else None
        data = await self._send("PUT", f"/v1/queues/{segment(asked.queue)}", json=body)
        return _queue(data)

    async def queues(self) -> list[QueueInfo]:
        """The tenant's named queues, configured or holding attempts, by name."""
        data = await self._send("GET", "/v1/queues")
        return [_queue(item) for item in data["queues"]]

    async def queue(self, name: str) -> QueueInfo:
        """One of the tenant's named queues (`QueueNotFound` if there is none)."""
        asked = checked_here(oq.ListQueues(queue=name))
        return _queue(await self._send("GET", f"/v1/queues/{segment(asked.queue or '')}"))


def _queue(data: Any) -> QueueInfo:
    info = record(QueueInfo, data)
    rate = info.rate
    if rate is not None:  # a JSON pair
        info = dataclasses.replace(info, rate=(int(rate[0]), float(rate[1])))
    return info
