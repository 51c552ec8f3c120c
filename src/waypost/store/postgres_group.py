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
- **Flow.** At most `in_flight` groups run at once, each of at most `max_batch`
  requests; a request that comes while fewer are running starts a group of its own
  at the next turn of the event loop, so an idle engine pays no wait.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .tx import Abort


class Dirty(Exception):
    """A request changed rows before its condition failed: the group must roll back."""


@dataclass
class _Request:
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    future: asyncio.Future[Any]

    @property
    def order(self) -> tuple[str, str]:
        """The run the request writes to (tenant, run id), for a steady lock order."""
        first = self.args[0] if self.args else None
        return (str(getattr(first, "tenant", "")), str(getattr(first, "run_id", "")))


Outcome = tuple[Any, BaseException | None]


class CommitGroups:
    """Gathers write requests and runs them in groups (see the module's text).

    `run_group(requests)` runs a list of `(fn, args)` in one transaction (on a thread)
    and returns each one's outcome; `submit` is what the store's `_write` awaits.
    """

    def __init__(
        self,
        run_group: Callable[[list[tuple[Callable[..., Any], tuple[Any, ...]]]], list[Outcome]],
        to_thread: Callable[[Callable[..., Any], Any], asyncio.Future[Any]],
        *,
        in_flight: int = 2,
        max_batch: int = 64,
    ) -> None:
        self._run_group = run_group
        self._to_thread = to_thread
        self.in_flight = in_flight
        self.max_batch = max_batch
        self._pending: list[_Request] = []
        self._running = 0
        self._flush_soon = False
        self._loop: asyncio.AbstractEventLoop | None = None

    def serves(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Whether requests made on `loop` may be grouped: those of the first loop that
        asked (a store used from another loop meanwhile writes without grouping)."""
        if self._loop is None or (self._loop.is_closed() and not self._running):
            self._loop = loop
        return self._loop is loop

    async def submit(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        self._pending.append(_Request(fn, args, fut))
        if self._running < self.in_flight and not self._flush_soon:
            self._flush_soon = True
            loop.call_soon(self._flush)
        return await fut

    def _flush(self) -> None:
        self._flush_soon = False
        while self._pending and self._running < self.in_flight:
            batch = self._pending[: self.max_batch]
            del self._pending[: self.max_batch]
            batch = [req for req in batch if not req.future.cancelled()]
            if not batch:
                continue
            batch.sort(key=lambda req: req.order)
            self._running += 1
            job = self._to_thread(self._run_group, [(req.fn, req.args) for req in batch])
            job.add_done_callback(functools.partial(self._landed, batch))

    def _landed(self, batch: list[_Request], done: asyncio.Future[Any]) -> None:
        self._running -= 1
        error = done.exception() if not done.cancelled() else asyncio.CancelledError()
        outcomes: list[Outcome] = (
            [(None, error)] * len(batch) if error is not None else done.result()
        )
        for req, (value, exc) in zip(batch, outcomes, strict=True):
            if req.future.done():
                continue
            if exc is not None:
                req.future.set_exception(exc)
            else:
                req.future.set_result(value)
        if self._pending:
            self._flush()


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
