"""Signed webhooks, the shared part: signing and verifying.

Used by the webhook notification sender and by signed `http` steps. The
headers are those of Standard Webhooks (`webhook-id`, `webhook-timestamp`,
`webhook-signature`), and the signature also covers what a receiver relies on
beyond the body:

    webhook-signature: wp1,<base64 of HMAC-SHA256(secret, content)>
    content = "wp1\\n" + id + "\\n" + timestamp + "\\n" + METHOD + "\\n" + URL + "\\n" + body

- the id, which is also the request's `Idempotency-Key`: a replay cannot pass
  as a new delivery;
- the timestamp (unix seconds): a replay is refused once it is older than the
  receiver's tolerance;
- the method and the target URL (in the normal form of `outbound.Target.url`):
  a request captured on its way to one endpoint cannot be replayed to another
  that shares the secret.

The fields before the body hold no line break, so the content is unambiguous.
The label is "wp1", not Standard Webhooks' "v1", because the signed content
differs: a library for that standard refuses these signatures rather than
checking less. Several space-separated signatures may be offered (the
receiver accepts any), so a secret can be rotated.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from collections.abc import Mapping

from .outbound import Target

VERSION = "wp1"
ID_HEADER = "webhook-id"
TIMESTAMP_HEADER = "webhook-timestamp"
SIGNATURE_HEADER = "webhook-signature"
IDEMPOTENCY_HEADER = "Idempotency-Key"


class WebhookSignatureError(ValueError):
    """A webhook request is unsigned, wrongly signed, or too old to accept."""


def secret_bytes(secret: bytes | str) -> bytes:
    return secret.encode() if isinstance(secret, str) else bytes(secret)


def signed_content(id: str, timestamp: int, method: str, url: str, body: bytes) -> bytes:
    """What the signature covers (`url` must be in normal form: `Target.parse(url).url`)."""
    if any(ch in field for field in (id, method, url) for ch in "\r\n"):
        raise ValueError("a signed webhook's id, method and URL hold no line break")
    head = f"{VERSION}\n{id}\n{timestamp}\n{method.upper()}\n{url}\n"
    return head.encode() + body


def sign(secret: bytes, id: str, timestamp: int, method: str, url: str, body: bytes) -> str:
    """The signature, "wp1," + base64 HMAC-SHA256 of the signed content."""
    digest = hmac.new(
        secret, signed_content(id, timestamp, method, url, body), hashlib.sha256
    ).digest()
    return f"{VERSION},{base64.b64encode(digest).decode()}"


def signature_headers(
    secret: bytes,
    *,
    id: str,
    method: str,
    target: Target,
    body: bytes,
    signature_header: str = SIGNATURE_HEADER,
    now: float | None = None,
) -> dict[str, str]:
    """The headers of a signed request: id, timestamp, signature, and Idempotency-Key = id."""
    timestamp = int(time.time() if now is None else now)
    return {
        ID_HEADER: id,
        TIMESTAMP_HEADER: str(timestamp),
        signature_header: sign(secret, id, timestamp, method, target.url, body),
        IDEMPOTENCY_HEADER: id,
    }


def verify_webhook(
    secret: bytes | str,
    body: bytes,
    headers: Mapping[str, str],
    *,
    url: str,
    method: str = "POST",
    tolerance: float = 300.0,
    now: float | None = None,
    signature_header: str = SIGNATURE_HEADER,
) -> None:
    """Check a received webhook; raise WebhookSignatureError if it must not be accepted.

    `body` is the raw request body, before any JSON parsing. `url` is the URL
    the sender was told to call (scheme, host, port, path and query; the scheme
    and host in any case, a default port or not), and `method` the request's
    method: a request signed for another endpoint is refused. A timestamp more
    than `tolerance` seconds from `now` (either way) is refused, and so is an
    `Idempotency-Key` other than the signed `webhook-id`: deduplicate by either.
    Header names match case-insensitively; `signature_header` names the header
    holding the signature when the sender was told to use another (an `http`
    step's `signature.header`).
    """
    lowered = {k.lower(): v for k, v in headers.items()}
    id = lowered.get(ID_HEADER)
    raw_timestamp = lowered.get(TIMESTAMP_HEADER)
    raw_signature = lowered.get(signature_header.lower())
    if id is None or raw_timestamp is None or raw_signature is None:
        raise WebhookSignatureError(
            f"missing {ID_HEADER}, {TIMESTAMP_HEADER} or {signature_header} header"
        )
    key = lowered.get(IDEMPOTENCY_HEADER.lower())
    if key is not None and key != id:
        raise WebhookSignatureError(f"{IDEMPOTENCY_HEADER} is not the signed {ID_HEADER}")
    try:
        timestamp = int(raw_timestamp.strip())
    except ValueError:
        raise WebhookSignatureError(f"{TIMESTAMP_HEADER} is not an integer") from None
    try:
        target = Target.parse(url)
    except ValueError as exc:
        raise WebhookSignatureError(f"the URL to verify against {exc}") from None
    try:
        expected = sign(secret_bytes(secret), id, timestamp, method, target.url, body)
    except ValueError:
        raise WebhookSignatureError(f"{ID_HEADER} holds a line break") from None
    offered = raw_signature.split()
    if not any(hmac.compare_digest(s.encode(), expected.encode()) for s in offered):
        raise WebhookSignatureError("webhook signature does not match")
    current = time.time() if now is None else now
    if abs(current - timestamp) > tolerance:
        raise WebhookSignatureError(
            f"webhook timestamp is {current - timestamp:.0f}s from now (tolerance {tolerance:.0f}s)"
        )


# == receiving: Standard Webhooks' own scheme ===========================================
# Webhooks waypost receives (`POST /v1/webhooks/{source}`) come from senders that sign
# as Standard Webhooks says, so any library of that standard can send them:
#
#     webhook-signature: v1,<base64 of HMAC-SHA256(key, id + "." + timestamp + "." + body)>
#
# where the key is the bytes the secret `whsec_<base64>` encodes. The sender's URL and
# method are not signed there: a source's secret serves that one source's URL alone.
STANDARD_VERSION = "v1"
STANDARD_SECRET_PREFIX = "whsec_"


def new_standard_secret() -> str:
    """A new secret in Standard Webhooks' form: `whsec_` and base64 of 32 random bytes."""
    return STANDARD_SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


def standard_key(secret: str) -> bytes:
    """The HMAC key of a `whsec_...` secret (the bytes its base64 encodes)."""
    return base64.b64decode(secret.removeprefix(STANDARD_SECRET_PREFIX), validate=True)


def standard_signature(key: bytes, id: str, timestamp: int, body: bytes) -> str:
    """ "v1," + base64 HMAC-SHA256 of `{id}.{timestamp}.{body}`."""
    digest = hmac.new(key, f"{id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    return f"{STANDARD_VERSION},{base64.b64encode(digest).decode()}"


def standard_signature_matches(
    key: bytes, id: str, timestamp: int, body: bytes, offered: str
) -> bool:
    """Whether one of the space-separated signatures `offered` is the body's (constant time)."""
    expected = standard_signature(key, id, timestamp, body).encode()
    found = False
    for signature in offered.split():
        found |= hmac.compare_digest(signature.encode(), expected)
    return found
