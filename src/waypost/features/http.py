"""The built-in activity behind the `http` steps of workflows defined as data.

`make_http_activity()` gives the activity "waypost.http": it sends one request
(url, method, headers, body, signature, timeout) and returns the answer's
body, parsed when it is JSON. Redirects are not followed.

Every request carries `Idempotency-Key` (the step's key, the same on every
attempt, so the receiver can drop a repeat) and `User-Agent: waypost`; a body
is sent as canonical JSON. A signed step carries `webhook-id` (= the
Idempotency-Key), `webhook-timestamp` and `webhook-signature`, an HMAC-SHA256
keyed with the tenant's named secret over the id, timestamp, method, URL and
body (`signing.py`), exactly as notification webhooks are signed, so receivers
check it with `waypost.verify_webhook`.

URLs are written by tenants, so a call must pass the allow-list (`egress.py`):
its host must be named there (`http_allow` on the engine, `--http-allow` on the
worker), and the addresses the host resolves to must be public or named there
too. Nothing is allowed by default, which keeps a definition from reaching
internal services.

The activity is async: a call holds no thread while it waits for the network.
The step's `timeout` bounds the whole request (resolving, connecting, sending,
reading every byte of the answer), and each tenant has at most
`max_calls_per_tenant` calls in flight on an engine; the others wait their turn
without delaying other tenants' calls or activities.

Failures: `HttpStepRetryable` for what may pass (408, 429, 5xx, connection
errors, timeouts); `HttpStepError`, which fails the step at once, for the rest
(other 4xx, 3xx, a refused host or address, a missing secret, a malformed
request). Error messages show only the origin of a URL, never its path or
query, which often hold credentials; secrets never appear in messages or results.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import ssl
import urllib.parse
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from datetime import timedelta
from email.message import Message
from typing import Any

from waypost.engine import tracing
from waypost.errors import ConfigurationError, NonRetryableError, WaypostError
from waypost.model.events import canonical_json
from waypost.model.retry import Retry
from waypost.runtime.context import ActivityContext
from waypost.runtime.interpreter import HTTP_ACTIVITY
from waypost.runtime.registry import activity

from .egress import AllowList
from .outbound import (
    PerKeyLimit,
    ProtocolError,
    Resolver,
    Response,
    Target,
    exchange,
    origin_of,
    scrub,
)
from .signing import (
    ID_HEADER,
    IDEMPOTENCY_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    secret_bytes,
    signature_headers,
)

__all__ = [
    "HTTP_ACTIVITY",
    "HttpStepError",
    "HttpStepRetryable",
    "SecretSource",
    "env_secrets",
    "make_http_activity",
    "secret_env_name",
]


SecretSource = Callable[[str, str], str | bytes | None]
"""(tenant, secret name) -> the secret, or None when it is not set."""

METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
DEFAULT_TIMEOUT = 30.0
DEFAULT_CALLS_PER_TENANT = 8
# Framing and routing belong to the connection to the allowed host, not to the step.
_MANAGED_HEADERS = ("Host", "Content-Length", "Transfer-Encoding", "Connection")
_RETRYABLE_STATUS = frozenset({408, 429})
_HEAD_CHARS = 200
_HEADER_NAME = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~\-]{1,100}")


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


SECRET_ENV_PREFIX = "WAYPOST_TENANT_SECRET_"
# Read by releases before 0.2, never now: the names were ambiguous across tenants (the
# message of a missing secret says so, whatever the environment holds).
_LEGACY_ENV_PREFIX = "WAYPOST_SECRET_"


def _env_escape(text: str) -> str:
    # ASCII letters and digits stay; every other character becomes "_" and two hex
    # digits per UTF-8 byte. "_" is always followed by a hex digit, so an escaped
    # text never holds "__" nor ends with "_": the "__" after the tenant is unambiguous.
    return "".join(
        ch
        if ch.isascii() and ch.isalnum()
        else "".join(f"_{b:02X}" for b in ch.encode("utf-8", "surrogatepass"))
        for ch in text
    )


def secret_env_name(tenant: str, name: str) -> str:
    """The environment variable holding a tenant's secret for `env_secrets`.

    WAYPOST_TENANT_SECRET_<tenant>__<name>, where ASCII letters (case kept) and
    digits stand for themselves and every other character is "_" plus two
    upper-case hex digits per UTF-8 byte ("-" is "_2D", "." is "_2E", "_" is
    "_5F"). Different (tenant, name) pairs always give different variables.
    """
    return f"{SECRET_ENV_PREFIX}{_env_escape(tenant)}__{_env_escape(name)}"


def env_secrets(tenant: str, name: str) -> str | None:
    """A tenant's secret from the environment variable `secret_env_name(tenant, name)`.

    Only that variable is read: there is no fallback shared by every tenant.
    """
    return os.environ.get(secret_env_name(tenant, name)) or None


def make_http_activity(
    *,
    allow: Collection[str] | None = None,
    secrets: SecretSource | None = None,
    max_response_bytes: int = 1_000_000,
    max_calls_per_tenant: int = DEFAULT_CALLS_PER_TENANT,
    tls: ssl.SSLContext | None = None,
) -> Callable[..., Any]:
    """The "waypost.http" activity, reaching only what `allow` names.

    `allow` holds host names ("api.example.com"), subdomain wildcards
    ("*.example.com", which does not admit "example.com" itself), "host:port",
    "*" for any host name, and the addresses or networks ("10.0.0.0/8",
    "127.0.0.1:8080") that non-public addresses must be in; none or empty
    refuses every host (see `egress.py`). `secrets` gives a tenant's named
    secrets (default: `env_secrets`). An answer larger than
    `max_response_bytes` fails the step. At most `max_calls_per_tenant` calls
    of one tenant are in flight at once on this engine. `tls` replaces the
    system's certificate authorities (a private CA).
    """
    if max_response_bytes < 0:
        raise ConfigurationError("max_response_bytes must not be negative")
    allowed = AllowList(allow)
    secret_source = secrets or env_secrets
    per_tenant = PerKeyLimit(max_calls_per_tenant)
    resolver = Resolver()
    tls = tls or ssl.create_default_context()  # made once: loading the authorities is slow

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
    async def http_call(ctx: ActivityContext, request: dict[str, Any]) -> Any:
        call = _Call.parse(request)
        if not allowed.admits(call.target.host, call.target.port):
            raise HttpStepError(
                f"{call.where}: host {call.target.authority} is not allowed; "
                "add it to the engine's http_allow option (worker: --http-allow)"
            )
        body = None if call.body is None else canonical_json(call.body).encode()
        # Waiting for a slot holds no thread; the step's own deadline still bounds it.
        async with per_tenant.slot(ctx.tenant):
            # Signed once the call may go: the timestamp is when it is sent.
            headers, hidden = _headers(ctx, call, body, secret_source)
            route = _Route(allowed, resolver, ctx.tenant, tls)
            target = call.target
            with tracing.client_span(call.method, target.scheme, target.host, target.port) as span:
                traceparent = tracing.traceparent_of(span) if span is not None else None
                if traceparent is not None and "traceparent" not in _lower(headers):
                    headers["traceparent"] = traceparent
                response = await _send(call, route, body, headers, max_response_bytes)
                tracing.response_status(span, response.status)
        if not hidden:
            return _answer(call, response, max_response_bytes)
        # A receiver may echo a header back: its secret must not reach the history.
        try:
            return _scrubbed(_answer(call, response, max_response_bytes), hidden)
        except (HttpStepError, HttpStepRetryable) as exc:
            exc.args = (scrub(str(exc), hidden),)
            raise

    return http_call


def _lower(headers: Mapping[str, str]) -> set[str]:
    return {name.lower() for name in headers}


@dataclass(frozen=True, slots=True)
class _SecretHeader:
    """A header whose value is a tenant's secret, looked up when the call is made."""

    secret: str
    format: str  # holds one "{}", where the secret goes


def _header_value(value: Any, name: str, where: str) -> str | _SecretHeader:
    if isinstance(value, Mapping) and set(value) <= {"secret", "format"}:
        secret, form = value.get("secret"), value.get("format", "{}")
        if (
            isinstance(secret, str)
            and secret
            and isinstance(form, str)
            and form.count("{") == form.count("}") == 1
            and "{}" in form
        ):
            if not _clean(form):
                raise HttpStepError(f"{where}: the format of header {name} {_UNCLEAN}")
            return _SecretHeader(secret, form)
    if not isinstance(value, str):
        raise HttpStepError(
            f"{where}: header {name} must be text or {{secret, format}} with one {{}} in format"
        )
    if not _clean(value):
        raise HttpStepError(f"{where}: header {name} {_UNCLEAN}")
    return value


_UNCLEAN = "holds a line break or a character outside Latin-1"


@dataclass(frozen=True, slots=True)
class _Call:
    target: Target
    method: str
    headers: dict[str, str | _SecretHeader]
    body: Any
    secret: str | None
    signature_header: str
    timeout: float

    @property
    def where(self) -> str:
        return f"{self.method} {self.target.origin}"

    @classmethod
    def parse(cls, request: Any) -> _Call:
        if not isinstance(request, Mapping):
            raise HttpStepError(f"http request must be an object, not {type(request).__name__}")
        url = request.get("url")
        if not isinstance(url, str):
            raise HttpStepError("http request needs a 'url' (text)")
        try:
            target = Target.parse(url)
        except ValueError as exc:
            raise HttpStepError(f"http request 'url' {exc}") from None
        body = request.get("body")
        method = request.get("method") or ("GET" if body is None else "POST")
        if not isinstance(method, str) or method.upper() not in METHODS:
            raise HttpStepError(f"http request 'method' must be one of {', '.join(METHODS)}")
        method = method.upper()
        where = f"{method} {target.origin}"
        raw_headers = request.get("headers") or {}
        if not isinstance(raw_headers, Mapping):
            raise HttpStepError(f"{where}: 'headers' must map names to values")
        headers: dict[str, str | _SecretHeader] = {}
        for name, value in raw_headers.items():
            if not isinstance(name, str) or not _HEADER_NAME.fullmatch(name):
                raise HttpStepError(f"{where}: {str(name)[:100]!r} is not a header name")
            headers[name] = _header_value(value, name, where)
        secret, signature_header = cls.signature(request.get("signature"), where)
        timeout = request.get("timeout", DEFAULT_TIMEOUT)
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not (timeout > 0 and math.isfinite(timeout))
        ):
            raise HttpStepError(f"{where}: 'timeout' must be a positive number of seconds")
        return cls(
            target=target,
            method=method,
            headers=dict(headers),
            body=body,
            secret=secret,
            signature_header=signature_header,
            timeout=float(timeout),
        )

    @staticmethod
    def signature(signature: Any, where: str) -> tuple[str | None, str]:
        if signature is None:
            return None, SIGNATURE_HEADER
        if not isinstance(signature, Mapping) or not isinstance(signature.get("secret"), str):
            raise HttpStepError(f"{where}: 'signature' needs a 'secret' name (text)")
        header = signature.get("header") or SIGNATURE_HEADER
        if not isinstance(header, str) or not re.fullmatch(r"[A-Za-z0-9\-]{1,100}", header):
            raise HttpStepError(f"{where}: 'signature.header' is not a header name")
        return signature["secret"], header


def _headers(
    ctx: ActivityContext, call: _Call, body: bytes | None, secrets: SecretSource
) -> tuple[dict[str, str], list[str]]:
    """The request's headers, and the secrets they hold (to keep out of what is stored)."""
    reserved = [IDEMPOTENCY_HEADER, *_MANAGED_HEADERS]
    if call.secret is not None:
        reserved += [ID_HEADER, TIMESTAMP_HEADER, call.signature_header]
    given = {name.lower(): name for name in call.headers}
    taken = [given[name.lower()] for name in reserved if name.lower() in given]
    if taken:
        raise HttpStepError(
            f"{call.where}: the step may not set header {taken[0]}; waypost sets it itself"
        )
    headers = {"User-Agent": "waypost"}
    if body is not None:
        headers["Content-Type"] = "application/json"
    # The step's own headers replace the defaults above whatever their spelling.
    defaults = {name.lower() for name in call.headers}
    headers = {k: v for k, v in headers.items() if k.lower() not in defaults}
    hidden: list[str] = []
    for name, value in call.headers.items():
        if isinstance(value, _SecretHeader):
            secret = _secret_text(ctx.tenant, value.secret, secrets, f"header {name}")
            hidden.append(secret)
            value = value.format.replace("{}", secret)
        headers[name] = value
    headers[IDEMPOTENCY_HEADER] = ctx.idempotency_key
    if call.secret is not None:
        key = secrets(ctx.tenant, call.secret)
        if not key:
            raise HttpStepError(_missing_secret(ctx.tenant, call.secret, secrets))
        headers.update(
            signature_headers(
                secret_bytes(key),
                id=ctx.idempotency_key,
                method=call.method,
                target=call.target,
                body=body or b"",
                signature_header=call.signature_header,
            )
        )
    return headers, hidden


def _secret_text(tenant: str, name: str, secrets: SecretSource, use: str) -> str:
    value = secrets(tenant, name)
    if not value:
        raise HttpStepError(_missing_secret(tenant, name, secrets))
    try:
        text = value.decode() if isinstance(value, bytes) else value
    except UnicodeDecodeError:
        text = "\n"  # refused below, like any value a header cannot carry
    if not _clean(text):
        # The value itself is never quoted.
        raise HttpStepError(f"secret {name!r} of tenant {tenant!r} for {use} {_UNCLEAN}")
    return text


def _missing_secret(tenant: str, name: str, secrets: SecretSource) -> str:
    # The same words whatever else the environment holds: the message is stored in the
    # tenant's history, and must not tell whether some other variable exists.
    if secrets is env_secrets:
        how = (
            f"set environment variable {secret_env_name(tenant, name)} where the worker runs "
            f"(names of the older form {_LEGACY_ENV_PREFIX}... are not read)"
        )
    else:
        how = "add it to the engine's secret source where the worker runs"
    return f"secret {name!r} of tenant {tenant!r} is not set: {how}"


@dataclass(frozen=True, slots=True)
class _Route:
    """How a tenant's call reaches its host: checked addresses, looked up on whose account."""

    allowed: AllowList
    resolver: Resolver
    tenant: str
    tls: ssl.SSLContext


async def _send(
    call: _Call, route: _Route, body: bytes | None, headers: dict[str, str], limit: int
) -> Response:
    target, where = call.target, call.where
    try:
        async with asyncio.timeout(call.timeout):
            found = await route.allowed.addresses(
                route.resolver, route.tenant, target.host, target.port
            )
            if not found.permitted:
                raise _refused_address(where, target, found.refused)
            return await exchange(
                target,
                call.method,
                headers,
                body,
                limit=limit,
                addresses=found.permitted,
                tls=route.tls,
            )
    except TimeoutError:  # before OSError, of which it is a kind
        raise HttpStepRetryable(
            f"{where} failed: no complete answer within the step's timeout of {call.timeout:g}s"
        ) from None
    except (OSError, ProtocolError) as e:
        raise HttpStepRetryable(f"{where} failed: {_describe(e)}") from None
    except ValueError as e:
        # Not echoed: it could quote a header value, which may be a credential.
        raise HttpStepError(f"{where}: cannot send the request ({type(e).__name__})") from None


def _refused_address(where: str, target: Target, refused: list[str]) -> HttpStepError:
    if not refused:
        return HttpStepError(f"{where}: host {target.authority} has no address")
    shown = ", ".join(refused[:4])
    return HttpStepError(
        f"{where}: host {target.authority} resolves to {shown}, a loopback, private or "
        "otherwise non-public address; allow the address or its network explicitly in "
        "http_allow (worker: --http-allow) if the call is meant to go there"
    )


def _scrubbed(value: Any, hidden: list[str]) -> Any:
    if isinstance(value, str):
        return scrub(value, hidden)
    if isinstance(value, list):
        return [_scrubbed(v, hidden) for v in value]
    if isinstance(value, dict):
        return {scrub(k, hidden): _scrubbed(v, hidden) for k, v in value.items()}
    return value


def _answer(call: _Call, response: Response, limit: int) -> Any:
    where, status, raw, info = call.where, response.status, response.body, response.headers
    if not 200 <= status < 300:
        head = _text(raw[: _HEAD_CHARS * 4], info)[:_HEAD_CHARS]
        raise _refused(where, status, head, info.get("Location"), call.target)
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


def _refused(
    where: str, status: int, head: str, location: str | None, target: Target
) -> WaypostError:
    if 300 <= status < 400:
        moved = f" to {origin_of(urllib.parse.urljoin(target.url, location))}" if location else ""
        return HttpStepError(
            f"{where} answered {status} (a redirect{moved}); redirects are not followed: "
            f"use the final URL. Body: {head!r}",
            status=status,
        )
    message = f"{where} answered {status}: {head!r}"
    if status in _RETRYABLE_STATUS or status >= 500:
        return HttpStepRetryable(message, status=status)
    return HttpStepError(message, status=status)


def _clean(value: str) -> bool:
    """Whether a header may carry this value: Latin-1 without line breaks."""
    if "\r" in value or "\n" in value:
        return False
    try:
        value.encode("latin-1")
    except UnicodeEncodeError:
        return False
    return True


def _describe(reason: BaseException) -> str:
    if isinstance(reason, ssl.SSLCertVerificationError):
        return f"TLS certificate not accepted ({reason.verify_message})"
    return str(reason) or type(reason).__name__


def _text(raw: bytes, headers: Message | None) -> str:
    charset = (headers.get_content_charset() if headers is not None else None) or "utf-8"
    try:
        return raw.decode(charset, errors="replace")
    except LookupError:
        return raw.decode("utf-8", errors="replace")
