"""How the requests of the remote client's named-queue calls cross the wire, over
`/v1/queues...` (the calls are the embedded engine's, made remote: `twins.remote_twin`)."""

from __future__ import annotations

import dataclasses
from typing import Any

from waypost.model import operations_queues as oq
from waypost.model.queues import QueueInfo

from .door import Sends
from .remote_wire import Wires, record, segment


async def _configure(send: Sends, asked: oq.ConfigureQueue) -> QueueInfo:
    body: dict[str, Any] = {}
    if asked.worker_concurrency != oq.KEEP:
        body["worker_concurrency"] = asked.worker_concurrency
    if asked.key_concurrency != oq.KEEP:
        body["key_concurrency"] = asked.key_concurrency
    if asked.concurrency != oq.KEEP:
        body["concurrency"] = asked.concurrency
    if asked.rate != oq.KEEP:
        body["rate"] = list(asked.rate) if asked.rate is not None else None
    return _queue(await send("PUT", f"/v1/queues/{segment(asked.queue)}", json=body))


async def _list(send: Sends, asked: oq.ListQueues) -> list[QueueInfo]:
    if asked.queue is not None:  # one queue has a route of its own
        return [_queue(await send("GET", f"/v1/queues/{segment(asked.queue)}"))]
    data = await send("GET", "/v1/queues")
    return [_queue(item) for item in data["queues"]]


def _queue(data: Any) -> QueueInfo:
    info = record(QueueInfo, data)
    rate = info.rate
    if rate is not None:  # a JSON pair
        info = dataclasses.replace(info, rate=(int(rate[0]), float(rate[1])))
    return info


QUEUE_WIRES: Wires = {
    oq.ConfigureQueue: _configure,
    oq.ListQueues: _list,
}
