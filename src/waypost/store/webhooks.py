"""The store's verbs for webhook sources, declared apart from `base.py` for its size
(`Store` includes them). A source is a tenant's, by (tenant, source id); a delivery finds
it by its `url_id` (decision 0031). Deliveries themselves are `Store.deliver_correlated`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from waypost.model.quotas import Quotas


@dataclass(frozen=True, slots=True)
class WebhookSourceRecord:
    """A webhook source of a tenant, and its secret: `POST /v1/webhooks/{url_id}` delivers
    to it (`url_id`: random, unique across tenants; a source made before version 19 has
    its id as its URL id)."""

    source: str
    tenant: str
    signal: str
    correlate_key: str
    correlate_path: str
    tolerance_seconds: int
    secret: str
    created_at: float
    created_by: str
    url_id: str = ""


class WebhookStore(Protocol):
    async def create_webhook_source(
        self, source: WebhookSourceRecord, quotas: Quotas | None = None
    ) -> bool:
        """Store a webhook source of its tenant; False (nothing written) if the tenant has
        one of that id. Its secret is sealed when the store has keys. Under `quotas`, one
        over `max_webhook_sources` is `QuotaExceeded`; a `url_id` another source has is
        `StoreContention`."""
        ...

    async def list_webhook_sources(self, tenant: str) -> list[WebhookSourceRecord]: ...

    async def delete_webhook_source(self, tenant: str, source: str) -> bool:
        """Delete a source of `tenant` and its delivery ids; False if the tenant has none."""
        ...

    async def webhook_source(self, url_id: str) -> WebhookSourceRecord | None:
        """A source by its URL id alone, whatever its tenant (how a webhook's tenant is
        learnt)."""
        ...

    async def reencrypt_webhook_secrets(self, tenant: str, dry_run: bool) -> tuple[int, int]:
        """Seal the tenant's webhook sources' secrets under the current key (plaintext ones
        too): (sources, re-sealed); `dry_run` counts and writes nothing."""
        ...
