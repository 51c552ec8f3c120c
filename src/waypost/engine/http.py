"""The built-in activity behind the `http` steps of workflows defined as data.

`make_http_activity()` gives the activity "waypost.http": it sends one request
(url, method, headers, body, signature, timeout) with the standard library and
returns the answer's body, parsed when it is JSON. Redirects are not followed.

Every request carries `Idempotency-Key` (the step's key, the same on every
attempt, so the receiver can drop a repeat) and `User-Agent: waypost`; a body
is sent as canonical JSON. A signed step carries `Waypost-Timestamp` and
`Waypost-Signature` ("v1=" + hex HMAC-SHA256 of f"{timestamp}." + body, keyed
with the tenant's named secret), exactly as notification webhooks are signed,
so receivers check it with `waypost.engine.senders.verify_webhook`.

URLs are written by tenants, so hosts are refused unless the allow-list names
them (`http_allow` on the engine, `--http-allow` on the worker): nothing is
allowed by default, which keeps a definition from reaching internal services.

Failures: `HttpStepRetryable` for what may pass (408, 429, 5xx, connection
errors, timeouts); `HttpStepError`, which fails the step at once, for the rest
(other 4xx, 3xx, a refused host, a missing secret, a malformed request). Error
messages show only the origin of a URL, never its path or query, which often
hold credentials; secrets never appear in messages or results.
"""

from __future__ import annotations

import http.client
import json
import math
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from datetime import timedelta
from email.message import Message
from typing import Any

from waypost.engine.context import ActivityContext
from waypost.engine.registry import activity
from waypost.engine.senders import _NoRedirect, _origin, _secret_bytes, _signature
from waypost.errors import ConfigurationError, NonRetryableError, WaypostError
from waypost.model.events import canonical_json
from waypost.model.retry import Retry

__all__ = [
    "HTTP_ACTIVITY",
    "HttpStepError",
    "HttpStepRetryable",
    "SecretSource",
    "env_secrets",
    "make_http_activity",
]

HTTP_ACTIVITY = "waypost.http"

SecretSource = Callable[[str, str], str | bytes | None]
"""(tenant, secret name) -> the secret, or None when it is not set."""

METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
DEFAULT_TIMEOUT = 30.0
SIGNATURE_HEADER = "Waypost-Signature"
TIMESTAMP_HEADER = "Waypost-Timestamp"
IDEMPOTENCY_HEADER = "Idempotency-Key"
# Framing and routing belong to the connection to the allowed host, not to the step.
_MANAGED_HEADERS = ("Host", "Content-Length", "Transfer-Encoding")
_RETRYABLE_STATUS = frozenset({408, 429})
_HEAD_CHARS = 200


class HttpStepError(NonRetryableError):
    """An http step failed in a way that retrying cannot mend; the step fails at once."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.error_details = {"status": status} if status is not None else None


class HttpStepRetryable(WaypostError):
    """An http step failed in a way that may pass (408, 429, 5xx, network); it is retried."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.error_details = {"status": status} if status is not None else None


def _env_part(text: str) -> str:
    return re.sub(r"[^A-Z0-9]", "_", text.upper())


def _env_names(tenant: str, name: str) -> tuple[str, str]:
    return (
        f"WAYPOST_SECRET_{_env_part(tenant)}__{_env_part(name)}",
        f"WAYPOST_SECRET_{_env_part(name)}",
    )


def env_secrets(tenant: str, name: str) -> str | None:
    """A tenant's secret from the environment: WAYPOST_SECRET_<TENANT>__<NAME>, else
    WAYPOST_SECRET_<NAME> (upper-cased, every character but A-Z and 0-9 made '_')."""
    for var in _env_names(tenant, name):
        value = os.environ.get(var)
        if value:
            return value
    return None


@dataclass(frozen=True, slots=True)
class _Allowed:
    host: str  # "*" for any host; "*.example.com" for its subdomains
    port: int | None  # None: any port

    def admits(self, host: str, port: int) -> bool:
        if self.port is not None and self.port != port:
            return False
        if self.host == "*":
            return True
        if self.host.startswith("*."):
            return host.endswith(self.host[1:])
        return host == self.host


def _normal_host(host: str) -> str:
    return host.lower().rstrip(".")


def _parse_allowed(entry: str) -> _Allowed:
    text = entry.strip()
    if text == "*":
        return _Allowed("*", None)
    if text.count(":") > 1 and not text.startswith("["):
        return _Allowed(_normal_host(text), None)  # a bare IPv6 address
    parts = urllib.parse.urlsplit("//" + text)
    try:
        port = parts.port
    except ValueError:
        port = -1
    host = _normal_host(parts.hostname or "")
    if (
        port == -1
        or not host
        or parts.path
        or parts.username is not None
        or "*" in host.removeprefix("*.")
    ):
        raise ConfigurationError(
            f"http allow-list entry {entry!r} is not 'host', '*.domain', 'host:port' or '*'"
        )
    return _Allowed(host, port)


def make_http_activity(
    *,
    allow: Collection[str] | None = None,
    secrets: SecretSource | None = None,
    max_response_bytes: int = 1_000_000,
) -> Callable[..., Any]:
    """The "waypost.http" activity, reaching only the hosts in `allow`.

    `allow` holds host names ("api.example.com"), subdomain wildcards
    ("*.example.com", which does not admit "example.com" itself), "host:port",
    or "*" for any host; none or empty refuses every host. `secrets` gives a
    tenant's named signing secrets (default: `env_secrets`). An answer larger
    than `max_response_bytes` fails the step.
    """
    if isinstance(allow, str):
        raise ConfigurationError("http allow-list must be a collection of hosts, not one string")
    if max_response_bytes < 0:
        raise ConfigurationError("max_response_bytes must not be negative")
    allowed = tuple(_parse_allowed(entry) for entry in allow or ())
    secret_source = secrets or env_secrets

    @activity(
        name=HTTP_ACTIVITY,
        retry=Retry(
            max_attempts=3,
            initial_interval=timedelta(seconds=1),
            backoff=2.0,
            max_interval=timedelta(seconds=30),
        ),
        timeout=timedelta(seconds=60),
    )
    def http_call(ctx: ActivityContext, request: dict[str, Any]) -> Any:
        call = _Call.parse(request)
        if not any(a.admits(call.host, call.port) for a in allowed):
            shown = call.host if ":" not in call.host else f"[{call.host}]"
            raise HttpStepError(
                f"{call.method} {call.origin}: host {shown}:{call.port} is not allowed; "
                "add it to the engine's http_allow option (worker: --http-allow)"
            )
        body = None if call.body is None else canonical_json(call.body).encode()
        headers = _headers(ctx, call, body, secret_source)
        return _send(call, body, headers, max_response_bytes)

    return http_call


@dataclass(frozen=True, slots=True)
class _Call:
    url: str
    method: str
    origin: str
    host: str
    port: int
    headers: dict[str, str]
    body: Any
    secret: str | None
    signature_header: str
    timeout: float

    @classmethod
    def parse(cls, request: Any) -> _Call:
        if not isinstance(request, Mapping):
            raise HttpStepError(f"http request must be an object, not {type(request).__name__}")
        url = request.get("url")
        if not isinstance(url, str):
            raise HttpStepError("http request needs a 'url' (text)")
        parts = urllib.parse.urlsplit(url)
        if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
            raise HttpStepError("http request 'url' must be http(s)://host/...")
        if parts.username is not None or parts.password is not None:
            # Also keeps "http://allowed@other/" from naming one host and reaching another.
            raise HttpStepError(
                "http request 'url' must not hold credentials; send them as headers"
            )
        try:
            port = parts.port or (443 if parts.scheme.lower() == "https" else 80)
        except ValueError:
            raise HttpStepError("http request 'url' has a bad port") from None
        body = request.get("body")
        method = request.get("method") or ("GET" if body is None else "POST")
        if not isinstance(method, str) or method.upper() not in METHODS:
            raise HttpStepError(f"http request 'method' must be one of {', '.join(METHODS)}")
        method = method.upper()
        origin = _origin(url)
        headers = request.get("headers") or {}
        if not isinstance(headers, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
        ):
            raise HttpStepError(f"{method} {origin}: 'headers' must map names to text")
        for name, value in headers.items():
            if not re.fullmatch(r"[A-Za-z0-9!#$%&'*+.^_`|~\-]{1,100}", name):
                raise HttpStepError(f"{method} {origin}: {name!r} is not a header name")
            if "\r" in value or "\n" in value or not _latin1(value):
                raise HttpStepError(
                    f"{method} {origin}: header {name} holds a line break or a character "
                    "outside Latin-1"
                )
        secret, signature_header = cls._signature(request.get("signature"), method, origin)
        timeout = request.get("timeout", DEFAULT_TIMEOUT)
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not (timeout > 0 and math.isfinite(timeout))
        ):
            raise HttpStepError(
                f"{method} {origin}: 'timeout' must be a positive number of seconds"
            )
        return cls(
            url=url,
            method=method,
            origin=origin,
            host=_normal_host(parts.hostname),
            port=port,
            headers=dict(headers),
            body=body,
            secret=secret,
            signature_header=signature_header,
            timeout=float(timeout),
        )

    @staticmethod
    def _signature(signature: Any, method: str, origin: str) -> tuple[str | None, str]:
        if signature is None:
            return None, SIGNATURE_HEADER
        if not isinstance(signature, Mapping) or not isinstance(signature.get("secret"), str):
            raise HttpStepError(f"{method} {origin}: 'signature' needs a 'secret' name (text)")
        header = signature.get("header") or SIGNATURE_HEADER
        if not isinstance(header, str) or not re.fullmatch(r"[A-Za-z0-9\-]{1,100}", header):
            raise HttpStepError(f"{method} {origin}: 'signature.header' is not a header name")
        return signature["secret"], header


def _headers(
    ctx: ActivityContext, call: _Call, body: bytes | None, secrets: SecretSource
) -> dict[str, str]:
    reserved = [IDEMPOTENCY_HEADER, *_MANAGED_HEADERS]
    if call.secret is not None:
        reserved += [TIMESTAMP_HEADER, call.signature_header]
    given = {name.lower(): name for name in call.headers}
    taken = [given[name.lower()] for name in reserved if name.lower() in given]
    if taken:
        raise HttpStepError(
            f"{call.method} {call.origin}: the step may not set header {taken[0]}; "
            "waypost sets it itself"
        )
    headers = {"User-Agent": "waypost"}
    if body is not None:
        headers["Content-Type"] = "application/json"
    # The step's own headers replace the defaults above whatever their spelling.
    defaults = {name.lower() for name in call.headers}
    headers = {k: v for k, v in headers.items() if k.lower() not in defaults}
    headers.update(call.headers)
    headers[IDEMPOTENCY_HEADER] = ctx.idempotency_key
    if call.secret is not None:
        secret = secrets(ctx.tenant, call.secret)
        if not secret:
            raise HttpStepError(_missing_secret(ctx.tenant, call.secret, secrets))
        timestamp = int(time.time())
        headers[TIMESTAMP_HEADER] = str(timestamp)
        headers[call.signature_header] = "v1=" + _signature(
            _secret_bytes(secret), timestamp, body or b""
        )
    return headers


def _missing_secret(tenant: str, name: str, secrets: SecretSource) -> str:
    if secrets is env_secrets:
        for_tenant, for_all = _env_names(tenant, name)
        how = f"set environment variable {for_tenant} (this tenant) or {for_all} (every tenant)"
    else:
        how = "add it to the engine's secret source"
    return f"secret {name!r} of tenant {tenant!r} is not set: {how} where the worker runs"


def _send(call: _Call, body: bytes | None, headers: dict[str, str], limit: int) -> Any:
    request = urllib.request.Request(call.url, data=body, headers=headers, method=call.method)
    opener = urllib.request.build_opener(_NoRedirect)
    where = f"{call.method} {call.origin}"
    try:
        with opener.open(request, timeout=call.timeout) as response:
            status: int = response.status
            raw: bytes = response.read(limit + 1)
            info: Message = response.headers
    except urllib.error.HTTPError as e:
        with e:  # an HTTPError holds the connection open until closed
            head = _text(e.read(_HEAD_CHARS * 4), e.headers)[:_HEAD_CHARS]
            location = e.headers.get("Location")
        raise _refused(where, e.code, head, location, call.url) from None
    except (urllib.error.URLError, http.client.HTTPException, OSError) as e:
        reason = e.reason if isinstance(e, urllib.error.URLError) else e
        raise HttpStepRetryable(f"{where} failed: {_describe(reason)}") from None
    except ValueError as e:
        # Not echoed: http.client quotes the offending header value, which may be a credential.
        raise HttpStepError(f"{where}: cannot send the request ({type(e).__name__})") from None
    if len(raw) > limit:
        raise HttpStepError(
            f"{where} answered {status} with more than {limit} bytes", status=status
        )
    if not raw:
        return None
    content_type = info.get_content_type()
    if content_type == "application/json" or content_type.endswith("+json"):
        try:
            return json.loads(raw)
        except ValueError:
            raise HttpStepError(
                f"{where} answered {status} with a body that is not JSON: "
                f"{_text(raw, info)[:_HEAD_CHARS]!r}",
                status=status,
            ) from None
    return _text(raw, info)


def _refused(where: str, status: int, head: str, location: str | None, url: str) -> WaypostError:
    if 300 <= status < 400:
        target = f" to {_origin(urllib.parse.urljoin(url, location))}" if location else ""
        return HttpStepError(
            f"{where} answered {status} (a redirect{target}); redirects are not followed: "
            f"use the final URL. Body: {head!r}",
            status=status,
        )
    message = f"{where} answered {status}: {head!r}"
    if status in _RETRYABLE_STATUS or status >= 500:
        return HttpStepRetryable(message, status=status)
    return HttpStepError(message, status=status)


def _latin1(value: str) -> bool:
    try:
        value.encode("latin-1")
    except UnicodeEncodeError:
        return False
    return True


def _describe(reason: object) -> str:
    if isinstance(reason, TimeoutError):
        return "timed out"
    return str(reason) or type(reason).__name__


def _text(raw: bytes, headers: Message | None) -> str:
    charset = (headers.get_content_charset() if headers is not None else None) or "utf-8"
    try:
        return raw.decode(charset, errors="replace")
    except LookupError:
        return raw.decode("utf-8", errors="replace")
