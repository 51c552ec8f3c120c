"""Webhook sources in the store's vocabulary (the verbs are `Store`'s, in `base.py`).
A source is a tenant's, by (tenant, source id); a delivery finds it by its `url_id`
(decision 0031). Deliveries themselves are `Store.deliver_correlated`."""

from __future__ import annotations

from dataclasses import dataclass


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
