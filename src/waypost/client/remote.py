"""`Client` and `AsyncClient`: start and follow runs on a `waypost server`, over HTTP.

For an application in another process or on another host: the same calls as the
embedded engine's (`start`, `signal`, `signal_with_start`, `get`, `result`,
`history`, and the engine's calls it makes remote: `cancel`, `fork`, `schedule`, ...), the same
records (`RunInfo`, `Event`, `Started`, `Forked`, `PurgeReport`, ...) and the same
errors (`RunNotFound`, `PermissionDenied`, `InvalidState`, `WorkflowFailed`, ...),
rebuilt from the API's error codes.
Values are JSON: a result comes back as the JSON the run stored.

`AsyncClient` is written once; `Client` is its blocking face, derived as
`Engine` is from `AsyncEngine` (its own event loop in a background thread).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import replace
from datetime import timedelta
from typing import Any, TypeVar

from waypost import errors as e
from waypost.engine import tracing
from waypost.model import operations as ops, surfaces
from waypost.model.definitions import DefinitionError, InputError
from waypost.model.definitions.format import Problem
from waypost.model.events import Event
from waypost.model.identity import preview
from waypost.model.operations_runs import MAX_HISTORY_PAGE
from waypost.model.records import Started
from waypost.model.requests import Http
from waypost.model.status import RunStatus, why_suspended

from .fork import ForkCalls
from .handles import UpdateHandle
from .operator import OperatorRemote, OperatorRemoteBlocking
from .queues import QueueCalls
from .remote_queues import QUEUE_WIRES
from .remote_runs import RUN_WIRES, run_info
from .remote_schedules import SCHEDULE_WIRES
from .remote_updates import UPDATE_WIRES
from .remote_users import USER_WIRES
from .remote_wire import Wires, checked_here, run_path
from .repairs import RepairRemote, RepairRemoteBlocking
from .retention import RetentionCalls
from .runs import RunQueryCalls
from .schedules import ScheduleCalls
from .sync import LoopFace, LoopThread, blocking
from .twins import remote_twin
from .updates import UpdateCalls, accept_update
from .users import UserCalls

try:
    import httpx
except ImportError as exc:  # pragma: no cover - the dependency is declared
    raise e.ConfigurationError(
        "the HTTP client needs httpx: pip install 'waypost[client]'"
    ) from exc

_WAIT = 30.0  # seconds one result request waits on the server


def _errors_by_code() -> dict[str, type[Exception]]:
    import re

    found: dict[str, type[Exception]] = {}
    for value in [*vars(e).values(), DefinitionError, InputError]:
        if isinstance(value, type) and issubclass(value, e.WaypostError):
            found[re.sub(r"(?<!^)(?=[A-Z])", "_", value.__name__).lower()] = value
    return found


_BY_CODE = _errors_by_code()
# How the requests of the calls below whose routes are written by hand cross the wire.
_WIRES: Wires = {**RUN_WIRES, **QUEUE_WIRES, **SCHEDULE_WIRES, **UPDATE_WIRES, **USER_WIRES}
_ENDED = {
    RunStatus.FAILED: e.WorkflowFailed,
    RunStatus.CANCELLED: e.WorkflowCancelled,
    RunStatus.TERMINATED: e.WorkflowTerminated,
}


def error_from(status: int, body: Any) -> Exception:
    """The waypost error an API error answer stands for."""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return e.WaypostError(f"the server answered {status} without an error body")
    code = str(error.get("code", ""))
    message = str(error.get("message", ""))
    found = error.get("details")
    details: dict[str, Any] = found if isinstance(found, dict) else {}
    kind = _BY_CODE.get(code)
    problems = [
        Problem(str(p.get("path", "")), str(p.get("message", "")))
        for p in details.get("problems", [])
        if isinstance(p, dict)
    ]
    if kind is e.Unauthenticated:
        return e.Unauthenticated()
    if kind is e.InvalidCredential:
        return e.InvalidCredential()
    if kind is e.QuotaExceeded:
        retry = details.get("retry_after")
        return e.QuotaExceeded(
            str(details.get("quota", "")),
            message,
            retry_after=float(retry) if isinstance(retry, int | float) else None,
        )
    if kind is e.InvalidRequest:
        field = details.get("field") or (problems[0].path if problems else "")
        if problems and not details.get("field"):  # the API's own check of the body
            said = [f"{p.path}: {p.message}" if p.path else p.message for p in problems[:5]]
            message = f"{message}: " + "; ".join(said)
        return e.InvalidRequest(message, field=str(field))
    if kind is DefinitionError:
        return DefinitionError(problems)
    if kind is InputError:
        return InputError(str(details.get("definition", "")), problems)
    if code == "too_large":  # the server's bound on a request body
        return e.QuotaExceeded("max_request_bytes", message)
    if kind is not None:
        try:
            return kind(message)
        except TypeError:
            pass
    if status >= 500 or code == "store_unavailable":
        return e.StoreError(f"the server could not answer ({status}): {message}")
    return e.WaypostError(f"{code or status}: {message}")


def _json_body(body: Any) -> bytes:
    try:
        text = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise e.PayloadError(f"the request cannot be sent as JSON: {preview(str(exc))}") from None
    return text.encode()


T = TypeVar("T")


class AsyncClient(OperatorRemote, RepairRemote):
    """Runs on a `waypost server`, as the API key's principal sees them.

    `AsyncClient(url, api_key)`; use it as `async with` or call `close()`.
    """

    def __init__(self, url: str, api_key: str, *, timeout: float = 30.0) -> None:
        if not url.startswith(("http://", "https://")):
            raise e.ConfigurationError(f"a server URL is http(s)://..., not {preview(url)}")
        self.url = url.rstrip("/")
        self._http = httpx.AsyncClient(
            base_url=self.url,
            headers={"Authorization": f"Bearer {api_key}"},
            timeout=httpx.Timeout(timeout + _WAIT),
        )

    def __repr__(self) -> str:  # never the key
        return f"AsyncClient({self.url!r})"

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._http.aclose()

    async def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        if "json" in kwargs:  # refused here as the engine refuses it: PayloadError
            kwargs["content"] = _json_body(kwargs.pop("json"))
            kwargs["headers"] = {"Content-Type": "application/json"}
        traceparent = tracing.current_traceparent()
        if traceparent is not None:  # a run this starts is part of the caller's trace
            kwargs["headers"] = {**kwargs.get("headers", {}), "traceparent": traceparent}
        try:
            response = await self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise e.StoreError(f"cannot reach the waypost server at {self.url}: {exc}") from exc
        if response.status_code >= 400:
            try:
                body = response.json()
            except ValueError:
                body = None
            raise error_from(response.status_code, body)
        return response

    async def _send(self, method: str, path: str, **kwargs: Any) -> Any:
        return (await self._request(method, path, **kwargs)).json()

    async def execute(self, request: ops.Request[T]) -> T:
        """Carry out an operation whose route is derived from its request's declaration
        (`Http(..., derived=True)`: the run commands), as the API key's principal. Its
        fields are checked here as the server's door checks them, before anything is
        sent. Other operations: their methods."""
        http = type(request).http
        if not isinstance(http, Http) or not http.derived:
            raise e.InvalidRequest(
                f"{request.name or type(request).__name__} is sent by its own method of "
                "the client, not by execute"
            )
        asked = checked_here(request)
        await self._send(http.method, http.url(asked), json=surfaces.body_of(asked))
        return None  # type: ignore[return-value]  # derived routes answer only "accepted"

    async def _carry(self, request: ops.Request[T]) -> T:
        """What a remote twin's engine call hands its request to (`twins.remote_twin`):
        sent over the route written by hand that its wire takes, checked here first, or
        else over its derived route (`execute`)."""
        sends = _WIRES.get(type(request))
        if sends is None:
            return await self.execute(request)
        answer: T = await sends(self._send, checked_here(request))
        return answer

    # == runs ============================================================================
    async def start(
        self,
        workflow: str,
        input: Any = None,
        *,
        run_id: str | None = None,
        version: str | int | None = None,
        concurrency_key: str | None = None,
        dedup_id: str | None = None,
        queue: str | None = None,
        run_timeout: timedelta | float | None = None,
    ) -> str:
        """Start a run of a workflow the server's workers serve, or of a published
        definition; its run id (the same run_id and input again find the same run).
        `concurrency_key`, `dedup_id`, `queue`, `run_timeout`: as `AsyncEngine.start`'s."""
        body: dict[str, Any] = {"workflow": workflow, "input": input}
        if run_id is not None:
            body["run_id"] = run_id
        if concurrency_key is not None:
            body["concurrency_key"] = concurrency_key
        if dedup_id is not None:
            body["dedup_id"] = dedup_id
        if queue is not None:
            body["queue"] = queue
        if run_timeout is not None:
            body["run_timeout"] = ops.run_timeout_seconds(run_timeout)
        if version is not None:
            body["version"] = version
        answer = await self._request("POST", "/v1/runs", json=body)
        return str(answer.json()["run_id"])

    async def signal_with_start(
        self,
        workflow: str,
        input: Any = None,
        *,
        run_id: str,
        signal: str,
        payload: Any = None,
        version: str | int | None = None,
    ) -> Started:
        """Start run `run_id` and deliver `signal`, or deliver it to the run of that id (its
        input is not compared), atomically; `Started.created` says which."""
        body: dict[str, Any] = {
            "workflow": workflow,
            "input": input,
            "run_id": run_id,
            "signal": signal,
            "payload": payload,
        }
        if version is not None:
            body["version"] = version
        answer = await self._request("POST", "/v1/runs/signal-with-start", json=body)
        return Started(str(answer.json()["run_id"]), created=answer.status_code == 201)

    async def history(self, run_id: str) -> list[Event]:
        """A run's history, oldest event first: read a page at a time (the server never
        sends a whole history at once), all of it kept here."""
        events: list[Event] = []
        after: int | None = 0
        while after is not None:
            page = await self.history_page(run_id, after_seq=after, limit=MAX_HISTORY_PAGE)
            events.extend(page.events)
            after = page.next_after
        return events

    async def result(self, run_id: str, timeout: float | None = None) -> Any:
        """Wait for the run to end: its result, or its end as an error (`WorkflowFailed`,
        `WorkflowCancelled`, `WorkflowTerminated`); `ResultTimeout` after `timeout` s."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            wait = _WAIT if deadline is None else max(0.0, min(_WAIT, deadline - time.monotonic()))
            answer = await self._request(
                "GET", run_path(run_id, "/result"), params={"wait": f"{wait:.3f}"}
            )
            info = run_info(answer.json())
            if info.finished:
                if info.status is RunStatus.COMPLETED:
                    return info.result
                raise _ENDED.get(info.status, e.WorkflowFailed)(
                    info.run_id, info.status.value, info.error
                )
            if deadline is not None and time.monotonic() >= deadline:
                state = info.status.value
                if info.status is RunStatus.SUSPENDED:
                    state += why_suspended(info.error)
                raise e.ResultTimeout(f"run {preview(run_id)} is still {state} after {timeout}s")
            await asyncio.sleep(0)

    # == the engine's calls, made remote (`twins.remote_twin`) ===========================
    # (the run commands, over their derived routes: `OperatorRemote`, `RepairRemote`)
    # over routes written by hand, each request sent by its wire (`_WIRES`)
    signal = remote_twin(UpdateCalls.signal)
    get = remote_twin(RunQueryCalls.get)
    history_page = remote_twin(RunQueryCalls.history_page)
    fork = remote_twin(ForkCalls.fork)
    verify = remote_twin(RunQueryCalls.verify)
    purge_runs = remote_twin(RetentionCalls.purge_runs)
    purged_run = remote_twin(RetentionCalls.purged_run)
    purged_runs = remote_twin(RetentionCalls.purged_runs)
    configure_queue = remote_twin(QueueCalls.configure_queue)
    queues = remote_twin(QueueCalls.queues)
    queue = remote_twin(QueueCalls.queue)
    schedule = remote_twin(ScheduleCalls.schedule)
    schedules = remote_twin(ScheduleCalls.schedules)
    describe_schedule = remote_twin(ScheduleCalls.describe_schedule)
    pause_schedule = remote_twin(ScheduleCalls.pause_schedule)
    resume_schedule = remote_twin(ScheduleCalls.resume_schedule)
    delete_schedule = remote_twin(ScheduleCalls.delete_schedule)
    backfill_schedule = remote_twin(ScheduleCalls.backfill_schedule)
    trigger_schedule = remote_twin(ScheduleCalls.trigger_schedule)
    query = remote_twin(UpdateCalls.query)
    update = remote_twin(UpdateCalls.update)

    async def start_update(
        self, run_id: str, name: str, *args: Any, update_id: str | None = None
    ) -> UpdateHandle:
        """Send update `name` and return once the run accepted it (see
        `AsyncEngine.start_update`); `await handle.result()` waits for its result."""
        return await accept_update(self, run_id, name, args, update_id, None)

    create_user = remote_twin(UserCalls.create_user)
    list_users = remote_twin(UserCalls.list_users)
    disable_user = remote_twin(UserCalls.disable_user)
    set_password = remote_twin(UserCalls.set_password)


class Client(LoopFace, OperatorRemoteBlocking, RepairRemoteBlocking):
    """The blocking face of `AsyncClient`: `Client(url, api_key)`, then `close()` (or `with`)."""

    aio: AsyncClient

    def __init__(self, url: str, api_key: str, *, timeout: float = 30.0) -> None:
        self._loop = LoopThread("asyncio", "waypost-client")
        try:
            self.aio = self._loop.call(_make(url, api_key, timeout))
        except BaseException:
            self._loop.stop()
            raise

    def __repr__(self) -> str:
        return f"Client({self.aio.url!r})"

    def _call(self, coro: Any) -> Any:
        return self._loop.call(coro, "the client is closed")

    execute = blocking(AsyncClient.execute)
    start = blocking(AsyncClient.start)
    signal = blocking(AsyncClient.signal)
    get = blocking(AsyncClient.get)
    history = blocking(AsyncClient.history)
    history_page = blocking(AsyncClient.history_page)
    result = blocking(AsyncClient.result)
    signal_with_start = blocking(AsyncClient.signal_with_start)
    # (the run commands: `OperatorRemoteBlocking`, `RepairRemoteBlocking`)
    fork = blocking(AsyncClient.fork)
    purge_runs = blocking(AsyncClient.purge_runs)
    purged_run = blocking(AsyncClient.purged_run)
    purged_runs = blocking(AsyncClient.purged_runs)
    verify = blocking(AsyncClient.verify)
    configure_queue = blocking(AsyncClient.configure_queue)
    queues = blocking(AsyncClient.queues)
    queue = blocking(AsyncClient.queue)
    schedule = blocking(AsyncClient.schedule)
    schedules = blocking(AsyncClient.schedules)
    describe_schedule = blocking(AsyncClient.describe_schedule)
    pause_schedule = blocking(AsyncClient.pause_schedule)
    resume_schedule = blocking(AsyncClient.resume_schedule)
    delete_schedule = blocking(AsyncClient.delete_schedule)
    backfill_schedule = blocking(AsyncClient.backfill_schedule)
    trigger_schedule = blocking(AsyncClient.trigger_schedule)
    query = blocking(AsyncClient.query)
    update = blocking(AsyncClient.update)
    start_update = blocking(AsyncClient.start_update, lambda self, h: replace(h, engine=self))
    create_user = blocking(AsyncClient.create_user)
    list_users = blocking(AsyncClient.list_users)
    disable_user = blocking(AsyncClient.disable_user)
    set_password = blocking(AsyncClient.set_password)


async def _make(url: str, api_key: str, timeout: float) -> AsyncClient:
    return AsyncClient(url, api_key, timeout=timeout)  # made on the loop it will run on
