"""Group commit on PostgreSQL: the commits of many runs in one transaction.

An engine running many runs at once makes many small write transactions (a step's
result, the next decision, the next task), each a thread hand-off, a BEGIN, a COMMIT
and a flush of the server's WAL. `CommitGroups` gathers the commits requested while
earlier ones are on their way into groups, and runs each group as one transaction on
one pooled connection: one hand-off, one BEGIN and COMMIT and one WAL flush for all of
them, as the SQLite store's group commit does (docs/decisions/0025).

What a caller is promised does not change: its request's future resolves only after
the group's COMMIT returned, so a commit that returned is as durable as one made
alone; a request that PostgreSQL's transaction (or the COMMIT) could not carry gets
the error it would have got alone.

- **Conditions.** A request whose condition fails (`Abort`) before it changed any
  row answers its conflict and the group goes on (the rows it read and locked stay
  locked until the group ends, nothing more). One that fails after changing a row, or
  any error in a statement (which aborts PostgreSQL's whole transaction), rolls the
  group back, and each of its requests then runs alone, as without grouping: the one
  at fault gets its own answer, the others commit.
- **A failed COMMIT** fails every request of the group with the store error (whether
  it landed is unknown, as for a commit made alone); none is run again.
- **Lock order.** A group takes its runs' rows in the order of their keys (a stable
  sort: one run's requests keep the order they came in), so two groups never wait on
  each other in a cycle over runs; a deadlock with other work is PostgreSQL's to
  detect, and then the group's requests run alone.
- **Flow.** Committer threads of their own (`pool_size` - 2 of them, at least one) each
  take what is queued, up to `max_batch` requests, as one group: an idle engine's
  commit goes at once, a busy one's waits for a thread and goes with the others that
  came meanwhile. A queue of their own and an answer per event loop cost less than a
  thread pool's hand-off per request.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .grouping import group_of, settle
from .tx import Abort


class Dirty(Exception):
    """A request changed rows before its condition failed: the group must roll back."""


@dataclass
class _Request:
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    future: asyncio.Future[Any]
    loop: asyncio.AbstractEventLoop

    @property
    def order(self) -> tuple[str, str]:
        """The run the request writes to (tenant, run id), for a steady lock order."""
        first = self.args[0] if self.args else None
        return (str(getattr(first, "tenant", "")), str(getattr(first, "run_id", "")))


Outcome = tuple[Any, BaseException | None]


class CommitGroups:
    """Gathers write requests and runs them in groups (see the module's text).

    `threads` committer threads take what is queued (up to `max_batch` requests), run
    it with `run_group(requests)` (one transaction; returns each request's outcome and
    never raises) and answer each request on its own event loop.
    """

    def __init__(
        self,
        run_group: Callable[[list[tuple[Callable[..., Any], tuple[Any, ...]]]], list[Outcome]],
        *,
        threads: int = 2,
        max_batch: int = 64,
        name: str = "waypost-pg-commit",
    ) -> None:
        self._run_group = run_group
        self.max_batch = max_batch
        self._queue: queue.SimpleQueue[_Request | None] = queue.SimpleQueue()
        self.busy = 0  # threads running a group (read by tests)
        self._threads = [
            threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True)
            for i in range(threads)
        ]
        for thread in self._threads:
            thread.start()

    @property
    def queued(self) -> int:
        return self._queue.qsize()

    async def submit(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        self._queue.put(_Request(fn, args, fut, loop))
        return await fut

    def stop(self) -> None:
        """Let the threads finish what is queued, then end them (blocks)."""
        for _ in self._threads:
            self._queue.put(None)
        for thread in self._threads:
            thread.join()

    def _work(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch, stopped = group_of(self._queue, first, self.max_batch, None)
            if stopped:
                self._queue.put(None)  # for the next turn of this loop
            batch.sort(key=lambda req: req.order)
            self.busy += 1
            try:
                outcomes = self._run_group([(req.fn, req.args) for req in batch])
            except BaseException as exc:  # a bug: every request of the group learns of it
                outcomes = [(None, exc)] * len(batch)
            finally:
                self.busy -= 1
            by_loop: dict[asyncio.AbstractEventLoop, list[tuple[_Request, Outcome]]] = {}
            for req, outcome in zip(batch, outcomes, strict=True):
                by_loop.setdefault(req.loop, []).append((req, outcome))
            for loop, answers in by_loop.items():
                with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits
                    loop.call_soon_threadsafe(_answer, answers)


def _answer(answers: list[tuple[_Request, Outcome]]) -> None:
    for req, (value, exc) in answers:
        settle(req.future, value, exc)


def run_requests(
    tx: Any, requests: list[tuple[Callable[..., Any], tuple[Any, ...]]]
) -> list[Outcome]:
    """Run `requests` one after another in `tx`'s open transaction (see the module's
    text); raises `Dirty`, or the first error, when the group must roll back."""
    outcomes: list[Outcome] = []
    for fn, args in requests:
        tx.dirty = False
        try:
            outcomes.append((fn(tx, *args), None))
        except Abort as abort:
            if tx.dirty:
                raise Dirty() from abort
            outcomes.append((abort.result, None))
    return outcomes
