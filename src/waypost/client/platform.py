"""The platform's calls of `AsyncEngine`: tenants, their quotas, API keys, webhook
sources and retention (a mixin of thin methods over the one door, kept apart for its size)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from waypost.model import operations as ops, operations_queues as oq, webhooks as wh
from waypost.model.identity import Role
from waypost.model.queues import QueueInfo
from waypost.model.records import (
    KeyInfo,
    NewKey,
    NewWebhookSource,
    PurgedRun,
    PurgeReport,
    TenantDeletion,
    TenantInfo,
    WebhookSourceInfo,
)

from .door import LocalDoor


class PlatformCalls:
    """Tenants, quotas, API keys and webhook sources, as the embedded API's local principal."""

    _local: LocalDoor  # the engine's door, as its local principal in a tenant

    async def create_tenant(
        self, tenant: str, *, quotas: Mapping[str, int] | None = None
    ) -> TenantInfo:
        """Create a tenant, so that API keys can be made for it; `TenantExists` if it is.

        `quotas` (quota name -> whole number) are stored with it. Only the platform
        operator (this API, the command line) may create tenants.
        """
        info: TenantInfo = await self._local(ops.CreateTenant(tenant=tenant, quotas=quotas), tenant)
        return info

    async def list_tenants(self) -> list[TenantInfo]:
        """Every tenant, by name."""
        found: list[TenantInfo] = await self._local(ops.ListTenants(), "default")
        return found

    async def disable_tenant(self, tenant: str, *, reason: str = "") -> TenantInfo:
        """Disable `tenant` (`TenantNotFound` if there is none): at once every API key and
        console session of it is refused (403 `tenant_disabled`), and none of its runs'
        work is claimed (workflow tasks, activity attempts, timers, schedules,
        notifications) until it is enabled; what is running finishes. Platform only."""
        info: TenantInfo = await self._local(
            ops.DisableTenant(tenant=tenant, reason=reason), tenant
        )
        return info

    async def enable_tenant(self, tenant: str) -> TenantInfo:
        """Enable a disabled `tenant` again: its keys and sessions work, its runs go on
        where they stood (timers that came due meanwhile fire now). Platform only."""
        info: TenantInfo = await self._local(ops.EnableTenant(tenant=tenant), tenant)
        return info

    async def delete_tenant(self, tenant: str, *, batch: int = 1000) -> TenantDeletion:
        """Delete up to `batch` rows of a disabled `tenant` (its runs, histories, tasks,
        timers, approvals, definitions, schedules, keys, users, ...), in one transaction;
        call again until the answer is `done` (its own row goes last). Another tenant's
        rows are never touched. `TenantNotDisabled` unless it was disabled first.
        Platform only."""
        done: TenantDeletion = await self._local(
            ops.DeleteTenant(tenant=tenant, batch=batch), tenant
        )
        return done

    async def create_key(
        self,
        principal: str,
        roles: Sequence[Role | str],
        *,
        expires_at: datetime | None = None,
        tenant: str = "default",
    ) -> NewKey:
        """Make an API key for `principal` in `tenant` (which must exist), with `roles`.

        The answer's `key` is the secret a client sends (`Authorization: Bearer ...`):
        it is shown this once and only its hash is stored. `expires_at` (with a time
        zone) must be in the future; without it the key lives until revoked.
        """
        request = ops.CreateKey(principal=principal, roles=roles, expires_at=expires_at)
        made: NewKey = await self._local(request, tenant)
        return made

    async def list_keys(self, *, tenant: str = "default") -> list[KeyInfo]:
        """The API keys of `tenant`, revoked and expired ones too (never their secrets)."""
        found: list[KeyInfo] = await self._local(ops.ListKeys(), tenant)
        return found

    async def revoke_key(self, key_id: str, *, tenant: str = "default") -> None:
        """Revoke an API key of `tenant`: it stops working at once (`KeyNotFound` if none)."""
        await self._local(ops.RevokeKey(key_id=key_id), tenant)

    async def create_webhook_source(
        self,
        source: str,
        *,
        signal: str,
        key: str,
        path: str,
        tolerance_seconds: int = 300,
        tenant: str = "default",
    ) -> NewWebhookSource:
        """Register a webhook source `source` of `tenant`: deliveries to the answer's
        `url_path` (`POST /v1/webhooks/{url_id}`, a random id) signal `signal` to the runs
        waiting with `correlate=(key, <the JSON body's value at path>)`. The answer's
        `secret` (shown this once) signs deliveries, Standard Webhooks' way."""
        request = wh.CreateWebhookSource(source, signal, key, path, tolerance_seconds)
        made: NewWebhookSource = await self._local(request, tenant)
        return made

    async def webhook_sources(self, *, tenant: str = "default") -> list[WebhookSourceInfo]:
        """The webhook sources of `tenant` (never their secrets)."""
        found: list[WebhookSourceInfo] = await self._local(wh.ListWebhookSources(), tenant)
        return found

    async def delete_webhook_source(self, source: str, *, tenant: str = "default") -> None:
        """Delete a webhook source: its deliveries are refused at once."""
        await self._local(wh.DeleteWebhookSource(source), tenant)

    async def get_tenant(self, *, tenant: str = "default") -> TenantInfo:
        """`tenant`'s effective quotas (`.quotas`: the `quotas` option with the tenant's
        overrides), its overrides (`.overrides`) and what it holds now (`.usage`:
        running_runs, activities_in_flight, pending_timers, definitions)."""
        info: TenantInfo = await self._local(ops.GetTenant(), tenant)
        return info

    async def set_quotas(self, tenant: str, quotas: Mapping[str, Any]) -> TenantInfo:
        """Override some of `tenant`'s quotas (the tenant must exist); answers as `get_tenant`.

        `quotas` maps quota names to a number, None (or "unlimited") for no limit, or
        "default" to take this engine's `quotas` option again. Admissions read the
        change at once, on every engine; what engines keep in memory (payload size,
        history length, activity leases) within 5 seconds.
        """
        info: TenantInfo = await self._local(ops.SetQuotas(tenant=tenant, quotas=quotas), tenant)
        return info

    # -- named queues -----------------------------------------------------------------
    async def configure_queue(
        self,
        name: str,
        *,
        concurrency: int | str | None = oq.KEEP,
        rate: tuple[int, float] | str | None = oq.KEEP,
        key_concurrency: int | str | None = oq.KEEP,
        worker_concurrency: int | str | None = oq.KEEP,
        tenant: str = "default",
    ) -> QueueInfo:
        """Set the limits of `tenant`'s queue `name` (the queue an `@activity(queue=...)`
        waits in); answers the queue as `queue` does.

        `concurrency`: at most this many of its attempts run at once, across every engine
        and host; `rate`: at most N attempts start per period seconds, `(N, period)`. None
        removes that limit; a limit not given stays as it is. Every engine's next claim
        honours the change. `key_concurrency`: at most this many at once of the runs
        started with one `concurrency_key` (a customer's id, say). `worker_concurrency`:
        at most this many of its attempts held at once by one engine (worker process).
        A queue that runs are started on (`start(..., queue=)`) admits runs under the
        same limits, counted apart from its attempts (decision 0022).
        """
        request = oq.ConfigureQueue(
            queue=name,
            concurrency=concurrency,
            rate=rate,
            key_concurrency=key_concurrency,
            worker_concurrency=worker_concurrency,
        )
        info: QueueInfo = await self._local(request, tenant)
        return info

    async def queues(self, *, tenant: str = "default") -> list[QueueInfo]:
        """`tenant`'s named queues, configured or holding attempts, by name: each one's
        limits, depth (attempts waiting), running count and oldest waiting age."""
        found: list[QueueInfo] = await self._local(oq.ListQueues(), tenant)
        return found

    async def queue(self, name: str, *, tenant: str = "default") -> QueueInfo:
        """One of `tenant`'s named queues (`QueueNotFound` if it has none of that name)."""
        found: list[QueueInfo] = await self._local(oq.ListQueues(queue=name), tenant)
        return found[0]

    # -- retention: purged runs -------------------------------------------------------
    async def purge_runs(
        self,
        older_than: timedelta | float,
        *,
        dry_run: bool = False,
        limit: int | None = None,
        reason: str | None = None,
        tenant: str = "default",
    ) -> PurgeReport:
        """Purge `tenant`'s finished runs that finished more than `older_than` (a timedelta,
        or seconds) ago, oldest first, at most `limit` (None: all), 500 per transaction.

        Each leaves a summary (`purged_run`, `purged_runs`: final status, times, its
        chain's length and last hash, who purged it and `reason`); its history, payloads,
        tasks, timers, approvals, credentials and outbox messages are deleted, and its id
        then answers `RunNotFound`. `dry_run` counts what would go and writes nothing.
        """
        seconds = older_than.total_seconds() if isinstance(older_than, timedelta) else older_than
        request = ops.PurgeRuns(
            older_than_seconds=seconds, dry_run=dry_run, limit=limit, reason=reason
        )
        report: PurgeReport = await self._local(request, tenant)
        return report

    async def purged_run(self, run_id: str, *, tenant: str = "default") -> PurgedRun:
        """The summary the purged run `run_id` left; `RunNotFound` if it has none."""
        found: PurgedRun = await self._local(ops.GetPurged(run_id=run_id), tenant)
        return found

    async def purged_runs(self, *, limit: int = 100, tenant: str = "default") -> list[PurgedRun]:
        """`tenant`'s purged runs, most recently purged first."""
        found: list[PurgedRun] = await self._local(ops.ListPurged(limit=limit), tenant)
        return found
