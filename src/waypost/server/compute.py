"""The compute processes of `waypost server`: where a tenant's expensive work runs.

Work whose cost a tenant shapes — definition runs (their expressions are the tenant's),
queries, the console's replay view, updates' validation and the verification of a
history, each a replay of a history the tenant made — never runs in the process that
answers requests (decision 0032). `waypost server` starts `--compute-processes`
processes beside itself (one by default), each an engine of its own on the same
database that:

- serves definition runs' workflow tasks (the server's own engine serves none; the
  store's wake-ups, LISTEN/NOTIFY or the SQLite file's sockets, bring the work over
  at once), and no activity: those stay with the server's engine;
- answers the requests the server forwards (`FORWARDED`), after the server's door has
  checked them, through its own door and compute lane (a share per tenant, a CPU-time
  limit per call, a bound on what a tenant may have waiting);
- runs at a lower scheduling priority (nice 10), so that on a busy machine the
  process that answers requests goes first.

The server supervises them: a process that ends is started again (its unanswered
calls answer `ComputeUnavailable`, 503), and one that says nothing for the backstop
(it sends a heartbeat every `HEARTBEAT` seconds from its event loop, which a thread
stuck holding the interpreter would stop) is killed and started again; a process
whose lane has run one call for the backstop (stuck where no CPU check reaches it,
such as a query handler's endless loop) stops itself and is started again. A call not
answered within the backstop answers 503 to its caller and is cancelled in the
process (dropped if it still waits its turn, stopped at its next check if it runs):
a tenant whose calls wait long behind its own heavy work gets refusals, and nobody
else's calls are lost with a process killed for it. What a process counts for metrics
is counted by the server's `/metrics`. Calls and answers travel as length-prefixed
pickles over a socket pair between the two processes, which nothing else can reach.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import json
import logging
import os
import pickle
import signal
import socket
import struct
import sys
from dataclasses import dataclass, field
from typing import Any, cast

from waypost.client.engine import AsyncEngine
from waypost.client.remote import error_from
from waypost.engine import tracing
from waypost.errors import ComputeUnavailable, QuotaExceeded, WaypostError
from waypost.features.senders import senders_from_url
from waypost.model import operations as ops
from waypost.model.identity import Principal, preview
from waypost.model.logs import configure_logging, logger
from waypost.model.observe import Observer
from waypost.runtime.registry import items_in_modules

from .errors import answer

log = logger("waypost.server")

FORWARDED: tuple[type[ops.Request[Any]], ...] = (ops.Query, ops.RunDataAt, ops.Update, ops.Verify)
"""The requests the server hands to its compute processes (each replays a history)."""

SETTINGS_VARIABLE = "WAYPOST_COMPUTE_SETTINGS"
_HEADER = struct.Struct(">I")
_MAX_FRAME = 256 * 1024 * 1024
NICENESS = 10  # the compute processes' scheduling priority: behind the server's
SWITCH_INTERVAL = 0.0005  # seconds a thread holds the interpreter's lock before handing it on
_READY_WAIT = 60.0  # seconds a call waits for a process that is (re)starting
HEARTBEAT = 1.0  # seconds between a compute process's signs of life
_OBSERVED = frozenset(name for name in dir(Observer) if not name.startswith("_"))


async def read_frame(reader: asyncio.StreamReader) -> Any:
    """The next object sent, or None at the end of the stream."""
    try:
        header = await reader.readexactly(_HEADER.size)
        (size,) = _HEADER.unpack(header)
        if size > _MAX_FRAME:
            raise ValueError(f"a frame of {size} bytes")
        return pickle.loads(await reader.readexactly(size))
    except asyncio.IncompleteReadError:
        return None


def frame(obj: Any) -> bytes:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return _HEADER.pack(len(data)) + data


# == the server's side ===================================================================
@dataclass(eq=False)
class _Process:
    """One compute process: its pipe, its calls waiting for answers, whether it is up."""

    slot: int
    process: asyncio.subprocess.Process | None = None
    writer: asyncio.StreamWriter | None = None
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    pending: dict[int, asyncio.Future[Any]] = field(default_factory=dict)
    heard: float = 0.0  # the loop's time of the process's last message

    def fail_pending(self, why: str) -> None:
        for fut in self.pending.values():
            if not fut.done():
                fut.set_exception(ComputeUnavailable(why))
        self.pending.clear()

    def kill(self) -> None:
        if self.process is not None and self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()


class ComputeProcesses:
    """The compute processes of one server process, started, supervised and called."""

    def __init__(
        self,
        settings_json: str,
        *,
        count: int = 1,
        observer: Observer | None = None,
        backstop: float = 60.0,
        max_waiting: int = 8,
    ) -> None:
        self.settings_json = settings_json
        self.observer = observer
        self.backstop = backstop
        # A tenant's calls in flight here: a flood past the bound is refused at once, as the
        # compute process's lane would refuse it, without sending it over.
        self.max_waiting = max_waiting
        self._inflight: dict[str, int] = {}
        self._procs = [_Process(slot) for slot in range(count)]
        self._turn = itertools.count()
        self._ids = itertools.count(1)
        self._supervisors: list[asyncio.Task[None]] = []
        self._stop_asked = False

    async def start(self) -> None:
        """Start the processes (calls wait for them to be ready)."""
        for proc in self._procs:
            task = asyncio.get_running_loop().create_task(
                self._supervise(proc), name=f"waypost-compute-{proc.slot}"
            )
            self._supervisors.append(task)

    async def call(self, request: ops.Request[Any], principal: Principal) -> Any:
        """Carry out `request` (checked by the door) in a compute process; its answer."""
        tenant = principal.tenant
        held = self._inflight.get(tenant, 0)
        if held >= self.max_waiting:
            raise QuotaExceeded(
                "max_compute_waiting",
                f"tenant {preview(tenant)} has {held} queries, validations or replays "
                "waiting or running, the most this server takes at once; try again shortly",
                retry_after=1.0,
            )
        self._inflight[tenant] = held + 1
        try:
            return await self._call(request, principal)
        finally:
            left = self._inflight[tenant] - 1
            if left:
                self._inflight[tenant] = left
            else:
                del self._inflight[tenant]

    async def _call(self, request: ops.Request[Any], principal: Principal) -> Any:
        tenant = principal.tenant
        proc = self._procs[next(self._turn) % len(self._procs)]
        try:
            async with asyncio.timeout(_READY_WAIT):
                await proc.ready.wait()
        except TimeoutError:
            raise ComputeUnavailable(
                "the server's compute process is not answering; try again shortly"
            ) from None
        writer = proc.writer
        if writer is None or writer.is_closing():
            raise ComputeUnavailable("the server's compute process is restarting; try again")
        call_id = next(self._ids)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        proc.pending[call_id] = fut
        writer.write(frame(("call", call_id, request, principal)))
        backstop = self.backstop + float(getattr(request, "timeout", 0) or 0)
        try:
            await writer.drain()
            async with asyncio.timeout(backstop):
                return await asyncio.shield(fut)
        except TimeoutError:
            log.warning(
                "compute process %d did not answer %s of tenant %s within %.0f s: cancelled",
                proc.slot,
                type(request).__name__,
                preview(tenant),
                backstop,
            )
            if not writer.is_closing():
                writer.write(frame(("cancel", call_id)))
            raise ComputeUnavailable(
                f"{type(request).__name__} did not finish within {backstop:.0f} s (this "
                "tenant's work waits its turn behind its own); nothing was changed: try "
                "again shortly"
            ) from None
        except (ConnectionError, RuntimeError) as exc:
            raise ComputeUnavailable(f"the server's compute process went away: {exc}") from None
        finally:
            proc.pending.pop(call_id, None)

    async def stop(self, grace: float = 30.0) -> None:
        """Stop the processes: each finishes what it serves (up to `grace`), then exits."""
        self._stop_asked = True
        for proc in self._procs:
            if proc.writer is not None:
                proc.writer.close()  # the end of its input: it stops serving and exits
        for proc in self._procs:
            if proc.process is not None:
                try:
                    async with asyncio.timeout(grace + 5):
                        await proc.process.wait()
                except TimeoutError:
                    proc.kill()
                    await proc.process.wait()
        for task in self._supervisors:
            task.cancel()
        await asyncio.gather(*self._supervisors, return_exceptions=True)

    async def _supervise(self, proc: _Process) -> None:
        delays = itertools.chain((0.5, 1.0, 2.0, 5.0), itertools.repeat(10.0))
        while True:
            code = await self._run_once(proc)
            if self._stop_asked:
                return
            delay = next(delays)
            log.warning(
                "compute process %d ended (exit code %s); starting it again in %.1f s",
                proc.slot,
                code,
                delay,
            )
            await asyncio.sleep(delay)

    async def _run_once(self, proc: _Process) -> int | None:
        ours, theirs = socket.socketpair()
        env = dict(os.environ)
        env[SETTINGS_VARIABLE] = self.settings_json
        try:
            proc.process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "waypost.server.compute",
                str(theirs.fileno()),
                pass_fds=(theirs.fileno(),),
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
            )
        finally:
            theirs.close()
        with contextlib.suppress(OSError):  # behind the server on a busy machine
            os.setpriority(os.PRIO_PROCESS, proc.process.pid, NICENESS)
        reader, proc.writer = await asyncio.open_unix_connection(sock=ours)
        loop = asyncio.get_running_loop()
        proc.heard = loop.time()
        watchdog = loop.create_task(self._watch(proc))
        try:
            while (message := await read_frame(reader)) is not None:
                proc.heard = loop.time()
                self._received(proc, message)
        except (ConnectionError, ValueError, pickle.UnpicklingError) as exc:
            log.error("compute process %d sent what cannot be read: %s", proc.slot, exc)
        finally:
            watchdog.cancel()
            proc.ready.clear()
            proc.writer.close()
            proc.fail_pending("the server's compute process ended; try again shortly")
            proc.kill()
        return await proc.process.wait()

    async def _watch(self, proc: _Process) -> None:
        """Kill the process once it has said nothing for the backstop (it is stuck)."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(HEARTBEAT)
            if loop.time() - proc.heard > self.backstop:
                await asyncio.sleep(HEARTBEAT)  # heartbeats read late by a busy loop count
            silent = loop.time() - proc.heard
            if silent > self.backstop:
                log.error(
                    "compute process %d has not answered for %.0f s: stopping it (it starts again)",
                    proc.slot,
                    silent,
                )
                proc.kill()
                return

    def _received(self, proc: _Process, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind == "alive":
            return
        if kind == "ready":
            proc.ready.set()
        elif kind == "observe":
            name, args = message[1], message[2]
            if self.observer is not None and name in _OBSERVED:
                getattr(self.observer, name)(*args)
        elif (fut := proc.pending.get(message[1])) is not None and not fut.done():
            if kind == "answer":
                fut.set_result(message[2])
            elif kind == "error":
                fut.set_exception(error_from(message[2], message[3]))
            else:
                fut.set_exception(RuntimeError(f"the compute process failed: {message[2]}"))


# == the compute process's side ===========================================================
class _Forwarding:
    """An `Observer` that hands every call to the server (its `/metrics` counts them)."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer
        self._loop = asyncio.get_running_loop()

    def __getattr__(self, name: str) -> Any:
        if name not in _OBSERVED:
            raise AttributeError(name)

        def send(*args: Any) -> None:
            data = frame(("observe", name, args))
            if self._loop.is_closed() or self._writer.is_closing():
                return
            self._loop.call_soon_threadsafe(self._writer.write, data)

        return send


async def _serve(settings: dict[str, Any], sock: socket.socket) -> None:
    reader, writer = await asyncio.open_unix_connection(sock=sock)
    options = dict(settings["engine_options"])
    options.update(
        serve_code=False,  # the server's engine runs the app's workflows and activities
        serve_definitions=settings["serve"],
        observer=cast(Observer, _Forwarding(writer)),
    )
    notifier = senders_from_url(settings["notify"])
    engine = AsyncEngine(settings["db"], notifier=notifier, **options)
    for item in items_in_modules(settings["apps"]):
        engine.register(item)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    calls: dict[int, asyncio.Task[None]] = {}

    async def carry_out(call_id: int, request: Any, principal: Principal) -> None:
        try:
            value = await engine.execute(request, principal)
            data = frame(("answer", call_id, value))
        except WaypostError as exc:
            status, body, _ = answer(exc)
            data = frame(("error", call_id, status, body))
        except Exception as exc:
            log.error("a forwarded %s failed", type(request).__name__, exc_info=exc)
            data = frame(("failed", call_id, type(exc).__name__))
        if not writer.is_closing():
            writer.write(data)

    async with engine, contextlib.AsyncExitStack() as serving:
        if settings["serve"]:
            await serving.enter_async_context(engine.running())
        writer.write(frame(("ready",)))
        beating = loop.create_task(_heartbeat(writer, engine, float(settings["backstop"])))
        reading = loop.create_task(read_frame(reader))
        stopping = loop.create_task(stop.wait())
        while True:
            await asyncio.wait({reading, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if stopping.done() or (message := reading.result()) is None:
                break
            reading = loop.create_task(read_frame(reader))
            if message[0] == "cancel":  # the server gave up on it: drop or stop it
                if (late := calls.get(message[1])) is not None:
                    late.cancel()
                continue
            _, call_id, request, principal = message
            task = loop.create_task(carry_out(call_id, request, principal))
            calls[call_id] = task
            task.add_done_callback(functools.partial(_forget, calls, call_id))
        reading.cancel()
        stopping.cancel()
        beating.cancel()
        if calls:
            await asyncio.wait(calls.values(), timeout=5)
        for task in list(calls.values()):
            task.cancel()
    writer.close()


def _forget(calls: dict[int, asyncio.Task[None]], call_id: int, _: object) -> None:
    calls.pop(call_id, None)


async def _heartbeat(writer: asyncio.StreamWriter, engine: AsyncEngine, backstop: float) -> None:
    """A sign of life to the server every `HEARTBEAT` seconds (from the event loop: a lane
    thread holding the interpreter stops it); the end of this process once a call has run
    on its lane for `backstop` seconds (a thread cannot be stopped: the process can)."""
    alive = frame(("alive",))
    while not writer.is_closing():
        writer.write(alive)
        await asyncio.sleep(HEARTBEAT)
        longest = (await engine.stats())["compute"]["longest"]
        if longest is not None and longest["seconds"] > backstop:
            log.error(
                "compute process did not answer %s within %.0f s: stopping it (it starts again)",
                longest["what"],
                backstop,
            )
            logging.shutdown()
            os.kill(os.getpid(), signal.SIGKILL)  # its threads cannot be waited for


def main(argv: list[str]) -> None:
    """The compute process: argv[1] is the descriptor of its end of the socket pair; its
    settings (the server's: database, apps, engine options) are in the environment."""
    settings: dict[str, Any] = json.loads(os.environ[SETTINGS_VARIABLE])
    configure_logging(settings["log_format"], tracing.log_ids)
    tracing.configure_from_environment()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the server, which stops us
    # The lane's threads hold the interpreter's lock for long stretches; the thread that
    # writes to the store gets it back after each statement within half a millisecond,
    # not five, so a write lock on a SQLite file shared with the server is never held
    # for long (measured: the server's p99 start 540 -> 43 ms during a tenant's flood).
    sys.setswitchinterval(SWITCH_INTERVAL)
    sock = socket.socket(fileno=int(argv[1]))
    asyncio.run(_serve(settings, sock))


if __name__ == "__main__":
    main(sys.argv)
