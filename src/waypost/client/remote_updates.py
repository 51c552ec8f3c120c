"""The `query` and `update` calls of `AsyncClient`, over the server's routes.

The same names, parameters and answers as the embedded engine's calls, without
`tenant=` (the API key decides it).
"""

from __future__ import annotations

import uuid
from typing import Any

import httpx

from .door import Sends
from .remote_wire import run_path, segment

_SLACK = 10.0  # seconds the HTTP request waits beyond the update's own timeout


class UpdateRequests:
    """Queries (readers) and updates (starters, operators) of a remote client."""

    _send: Sends  # the JSON answer of a request (an error answer raised as its error)

    async def query(self, run_id: str, name: str, *args: Any) -> Any:
        """What the query handler `name` of run `run_id`'s code answers for `args`;
        nothing is recorded. `QueryFailed` if there is no such query or it failed."""
        path = run_path(run_id, f"/queries/{segment(name)}")
        data = await self._send("POST", path, json={"args": list(args)})
        return data.get("result")

    async def update(
        self,
        run_id: str,
        name: str,
        *args: Any,
        update_id: str | None = None,
        timeout: float = 60.0,
    ) -> Any:
        """Send update `name` to run `run_id` and wait (at most `timeout` seconds, at
        most the server's limit) for its handler's result. `UpdateRejected`: refused by
        its validator, nothing recorded; `UpdateFailed`: its handler raised;
        `UpdateTimeout`: accepted, not done yet (ask again with the same `update_id`; one
        is made here if None, so a retry of this call never runs it twice)."""
        body = {
            "args": list(args),
            "update_id": update_id or f"upd-{uuid.uuid4().hex}",
            "timeout": timeout,
        }
        path = run_path(run_id, f"/updates/{segment(name)}")
        wait = httpx.Timeout(float(timeout) + _SLACK) if isinstance(timeout, int | float) else None
        data = await self._send("POST", path, json=body, timeout=wait)
        return data.get("result")
