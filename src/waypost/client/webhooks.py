"""Webhook sources of `AsyncEngine`: register, list and delete them (a mixin of thin
methods over the one door)."""

from __future__ import annotations

from waypost.model import webhooks as wh
from waypost.model.records import NewWebhookSource, WebhookSourceInfo

from .door import LocalDoor


class WebhookCalls:
    """Webhook sources of a tenant, as the embedded API's local principal."""

    _local: LocalDoor  # the engine's door, as its local principal in a tenant

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
        return await self._local(request, tenant)

    async def webhook_sources(self, *, tenant: str = "default") -> list[WebhookSourceInfo]:
        """The webhook sources of `tenant` (never their secrets)."""
        return await self._local(wh.ListWebhookSources(), tenant)

    async def delete_webhook_source(self, source: str, *, tenant: str = "default") -> None:
        """Delete a webhook source: its deliveries are refused at once."""
        await self._local(wh.DeleteWebhookSource(source), tenant)
