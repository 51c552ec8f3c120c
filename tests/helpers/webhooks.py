"""Deliveries signed as a Standard Webhooks sender signs them."""

from __future__ import annotations

import base64
import hashlib
import hmac
import time


def sign(secret: str, delivery_id: str, timestamp: int, body: bytes) -> str:
    """The `webhook-signature` of `body`: HMAC-SHA256 over "id.timestamp.body"."""
    key = base64.b64decode(secret.removeprefix("whsec_"))
    content = f"{delivery_id}.{timestamp}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(key, content, hashlib.sha256).digest()).decode()


def webhook_headers(
    secret: str, delivery_id: str, body: bytes, *, timestamp: int | None = None
) -> dict[str, str]:
    """The three signature headers of a delivery of `body` (now, unless `timestamp`)."""
    ts = int(time.time()) if timestamp is None else timestamp
    return {
        "webhook-id": delivery_id,
        "webhook-timestamp": str(ts),
        "webhook-signature": sign(secret, delivery_id, ts, body),
    }


def signed_headers(
    secret: str, delivery_id: str, body: bytes, *, timestamp: int | None = None
) -> dict[str, str]:
    """The headers of a signed JSON delivery of `body`."""
    headers = webhook_headers(secret, delivery_id, body, timestamp=timestamp)
    return {**headers, "content-type": "application/json"}
