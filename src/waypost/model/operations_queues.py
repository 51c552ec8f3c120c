"""Named queues' requests (re-exported by `waypost.model.operations`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from waypost.errors import InvalidRequest
from waypost.model.identity import Principal, Role
from waypost.model.queues import QueueInfo, check_concurrency, check_queue_name, check_rate
from waypost.model.requests import READERS, Cli, Http, Request

KEEP = "keep"
"""In `ConfigureQueue`: leave this limit as it is."""


@dataclass(frozen=True)
class ConfigureQueue(Request[QueueInfo]):
    """Set the limits of one of the tenant's named queues (`QueueInfo`).

    `concurrency`: at most this many attempts of the queue leased at once, across
    every engine; `rate`: at most N attempts started per period seconds, as (N, period);
    `key_concurrency`: at most this many at once of the runs started with one
    `concurrency_key`; `worker_concurrency`: at most this many attempts held at once by
    one engine. Runs started on the queue are admitted under the same limits, counted
    apart from its attempts.
    None removes that limit; `KEEP` (the default) leaves it as it is.
    """

    roles = frozenset({Role.OPERATOR})
    name = "configure queue"
    call = "configure_queue"
    http = Http("PUT", "/v1/queues/{name:id}", tag="queues")
    cli = Cli("queues set")
    queue: str = ""
    concurrency: Any = KEEP
    rate: Any = KEEP
    key_concurrency: Any = KEEP
    worker_concurrency: Any = KEEP

    def checked(self, principal: Principal) -> Request[QueueInfo]:
        done = super().checked(principal)
        check_queue_name(self.queue)
        changes: dict[str, Any] = {}
        if not (isinstance(self.concurrency, str) and self.concurrency == KEEP):
            changes["concurrency"] = check_concurrency(self.concurrency)
        if not (isinstance(self.rate, str) and self.rate == KEEP):
            changes["rate"] = check_rate(self.rate)
        per_key = self.key_concurrency
        if not (isinstance(per_key, str) and per_key == KEEP):
            changes["key_concurrency"] = check_concurrency(per_key, "key_concurrency")
        per_worker = self.worker_concurrency
        if not (isinstance(per_worker, str) and per_worker == KEEP):
            changes["worker_concurrency"] = check_concurrency(per_worker, "worker_concurrency")
        if not changes:
            raise InvalidRequest(
                "give a limit to set: concurrency, rate, key_concurrency or worker_concurrency",
                field="queue",
            )
        return dataclasses.replace(done, **changes)  # type: ignore[type-var]


@dataclass(frozen=True)
class ListQueues(Request[list[QueueInfo]]):
    """The tenant's named queues (`list[QueueInfo]`): those with limits and those holding
    attempts, by name; just `queue` if given (`QueueNotFound` if it is neither)."""

    roles = READERS
    name = "list queues"
    call = "queues"
    http = Http("GET", "/v1/queues", tag="queues")
    cli = Cli("queues list")
    queue: str | None = None

    def checked(self, principal: Principal) -> Request[list[QueueInfo]]:
        if self.queue is not None:
            check_queue_name(self.queue)
        return super().checked(principal)


QUEUE_OPERATIONS = (ConfigureQueue, ListQueues)
