"""How the requests of the remote client's `signal`, `query` and `update` cross the wire
(the calls are the embedded engine's, made remote: `twins.remote_twin`)."""

from __future__ import annotations

import uuid
from typing import Any

import httpx

from waypost.model import operations as ops

from .door import Sends
from .remote_wire import Wires, run_path, segment

_SLACK = 10.0  # seconds the HTTP request waits beyond the update's own timeout


async def _signal(send: Sends, asked: ops.Signal) -> None:
    path = run_path(asked.run_id, f"/signals/{segment(asked.signal)}")
    await send("POST", path, json={"payload": asked.payload})


async def _query(send: Sends, asked: ops.Query) -> Any:
    path = run_path(asked.run_id, f"/queries/{segment(asked.query)}")
    data = await send("POST", path, json={"args": list(asked.args)})
    return data.get("result")


async def _update(send: Sends, asked: ops.Update) -> ops.UpdateAnswer:
    # An id made here when none is given: a retry of the call never runs the update twice.
    update_id = asked.update_id or f"upd-{uuid.uuid4().hex}"
    body = {"args": list(asked.args), "update_id": update_id, "timeout": asked.timeout}
    path = run_path(asked.run_id, f"/updates/{segment(asked.update)}")
    wait = httpx.Timeout(float(asked.timeout) + _SLACK)
    data = await send("POST", path, json=body, timeout=wait)
    return ops.UpdateAnswer(update_id, data.get("result"))


UPDATE_WIRES: Wires = {
    ops.Signal: _signal,
    ops.Query: _query,
    ops.Update: _update,
}
