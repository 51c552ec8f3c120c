"""Notification senders: how an approval request reaches the person who decides it.

The engine writes each notification to a transactional outbox and, after the
commit, hands it to a `Sender` from a worker thread. A sender either delivers or
raises; any exception means "try again later", so delivery is at least once and
receivers deduplicate by `Notification.id`, which stays the same across retries
(the e-mail Message-ID and the webhook's `Waypost-Id` header carry it).

The tokens and the links that embed them are credentials: they travel only
inside the notification itself and never appear in logs, reprs or error
messages.
"""

from __future__ import annotations

import email.utils
import hashlib
import hmac
import json
import logging
import os
import smtplib
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from email.message import EmailMessage
from pathlib import Path
from typing import Any, Protocol

from waypost.errors import ConfigurationError, WaypostError
from waypost.model.events import canonical_json

log = logging.getLogger("waypost.notify")

__all__ = [
    "DeliveryError",
    "FileSender",
    "LogSender",
    "Notification",
    "Sender",
    "SmtpSender",
    "WebhookSender",
    "WebhookSignatureError",
    "senders_from_url",
    "verify_webhook",
]


class DeliveryError(WaypostError):
    """The receiving end refused a notification (e.g. a webhook answered non-2xx)."""


class WebhookSignatureError(ValueError):
    """A webhook request is unsigned, wrongly signed, or too old to accept."""


@dataclass(frozen=True, slots=True)
class Notification:
    """One message to one approver; `id` is stable across delivery retries."""

    id: str
    kind: str
    tenant: str
    approval_id: str
    run_id: str
    step: str
    name: str
    approver: str
    expires_at: float | None  # None: the approval never expires
    # Credentials: kept out of the repr so that logging a notification leaks nothing.
    approve_token: str = field(repr=False)
    reject_token: str = field(repr=False)
    approve_url: str = field(repr=False)
    reject_url: str = field(repr=False)
    data: Any = None

    @property
    def expires(self) -> str:
        """The expiry as ISO-8601 in UTC."""
        if self.expires_at is None:
            return "never"
        return datetime.fromtimestamp(self.expires_at, UTC).isoformat()

    def to_json(self) -> dict[str, Any]:
        """All fields, plus the expiry as ISO-8601 (UTC) under "expires"."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["expires"] = self.expires
        return out


class Sender(Protocol):
    """Delivers notifications somewhere a person will see them."""

    def send(self, notification: Notification) -> None:
        """Deliver or raise (any exception = retry later). Called from a worker thread."""
        ...


class LogSender:
    """Logs each notification to "waypost.notify" at INFO, tokens and links withheld.

    For development and for deployments that notify by other means: the log
    shows that a request went out, but gives nobody the power to decide it.
    """

    def send(self, notification: Notification) -> None:
        n = notification
        log.info(
            "notification %s (%s) for %s: approval %r (%s) of run %s step %s in tenant %s, "
            "expires %s; tokens and links withheld",
            n.id,
            n.kind,
            n.approver,
            n.name,
            n.approval_id,
            n.run_id,
            n.step,
            n.tenant,
            n.expires,
        )

    def __repr__(self) -> str:
        return "LogSender()"


class FileSender:
    """Appends each notification as one JSON line to a file, like a development mail backend.

    Each line goes out in a single `os.write` on a descriptor opened with
    O_APPEND, then fsync: processes sharing the file never interleave lines.
    The file is created readable by its owner only, since it holds tokens.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def send(self, notification: Notification) -> None:
        line = (
            json.dumps(notification.to_json(), sort_keys=True, ensure_ascii=False) + "\n"
        ).encode()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            written = os.write(fd, line)
            if written != len(line):
                # Finishing with a second write could interleave with another process.
                raise OSError(f"short write to {self.path}: {written} of {len(line)} bytes")
            os.fsync(fd)
        finally:
            os.close(fd)

    def __repr__(self) -> str:
        return f"FileSender({str(self.path)!r})"


def principal_address(principal: str) -> str | None:
    """The principal itself if it looks like an e-mail address, else None."""
    return principal if "@" in principal else None


_SUBJECTS = {"approval.requested": "Approval requested"}


class SmtpSender:
    """Sends each notification as a plain-text e-mail through an SMTP server.

    The Message-ID is derived from the notification id, so a retried delivery
    carries the same Message-ID and mail systems can drop the duplicate.
    `address_of` maps an approver principal to an address (by default the
    principal itself when it contains "@").
    """

    def __init__(
        self,
        host: str = "localhost",
        port: int = 25,
        *,
        sender: str = "waypost@localhost",
        address_of: Callable[[str], str | None] = principal_address,
        starttls: bool = False,
        username: str | None = None,
        password: str | None = None,
        timeout: float = 10.0,
        subject_prefix: str = "[waypost]",
    ) -> None:
        self.host = host
        self.port = port
        self.sender = sender
        self.address_of = address_of
        self.starttls = starttls
        self.username = username
        self._password = password
        self.timeout = timeout
        self.subject_prefix = subject_prefix

    def message(self, notification: Notification) -> EmailMessage:
        """The e-mail for a notification (raises if the approver has no address)."""
        n = notification
        to = self.address_of(n.approver)
        if not to:
            raise ConfigurationError(f"no e-mail address for approver {n.approver!r}")
        msg = EmailMessage()
        msg["From"] = self.sender
        msg["To"] = to
        title = _SUBJECTS.get(n.kind, n.kind)
        msg["Subject"] = f"{self.subject_prefix} {title}: {n.name} for run {n.run_id}".lstrip()
        msg["Message-ID"] = _message_id(n.id, self.sender)
        msg["Date"] = email.utils.format_datetime(datetime.now(UTC))
        # RFC 3834: no vacation auto-replies to a machine-sent message.
        msg["Auto-Submitted"] = "auto-generated"
        msg["Waypost-Id"] = n.id
        msg.set_content(_body(n))
        return msg

    def send(self, notification: Notification) -> None:
        msg = self.message(notification)
        with smtplib.SMTP(self.host, self.port, timeout=self.timeout) as smtp:
            if self.starttls:
                smtp.starttls(context=ssl.create_default_context())
            if self.username is not None:
                smtp.login(self.username, self._password or "")
            smtp.send_message(msg)

    def __repr__(self) -> str:
        return f"SmtpSender({self.host!r}, {self.port!r}, sender={self.sender!r})"


def _message_id(notification_id: str, sender: str) -> str:
    # Percent-encoding (dots included) keeps any id a valid, reversible dot-atom.
    local = urllib.parse.quote(notification_id, safe="").replace(".", "%2E")
    domain = sender.rpartition("@")[2] or "localhost"
    return f"<waypost.{local}@{domain}>"


def _body(n: Notification) -> str:
    lines = [
        f"Your decision is requested on approval {n.name!r}.",
        "",
        f"Run:      {n.run_id}",
        f"Step:     {n.step}",
        f"Tenant:   {n.tenant}",
        f"Approval: {n.approval_id}",
        f"Expires:  {n.expires}",
    ]
    if n.data is not None:
        lines += ["", "Details:", json.dumps(n.data, indent=2, sort_keys=True, ensure_ascii=False)]
    lines += [
        "",
        "To approve:",
        f"  {n.approve_url}",
        "",
        "To reject:",
        f"  {n.reject_url}",
        "",
        "Each link opens a confirmation page; nothing is decided until you confirm there.",
        "These links are yours alone: do not forward this message.",
        "",
        f"Notification {n.id}",
    ]
    return "\n".join(lines) + "\n"


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    # urllib would turn a redirected POST into a bodiless GET and report success.
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class WebhookSender:
    """POSTs each notification as canonical JSON, signed with HMAC-SHA256.

    Headers: "Waypost-Id" (the notification id, for deduplication),
    "Waypost-Timestamp" (unix seconds) and "Waypost-Signature"
    ("v1=" + hex HMAC-SHA256 of f"{timestamp}.{body}"). Receivers check them
    with `verify_webhook`. Redirects are not followed; non-2xx raises.
    """

    def __init__(
        self,
        url: str,
        secret: bytes | str,
        *,
        timeout: float = 10.0,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigurationError("webhook URL must be http(s)://host/...")
        try:
            parts.port  # noqa: B018 (urlsplit checks the port only when asked)
        except ValueError:
            raise ConfigurationError("webhook URL has a bad port") from None
        self._secret = _secret_bytes(secret)
        if not self._secret:
            raise ConfigurationError("webhook secret must not be empty")
        self.url = url
        self.timeout = timeout
        self.headers = dict(headers or {})
        self._opener = urllib.request.build_opener(_NoRedirect)

    def send(self, notification: Notification) -> None:
        body = canonical_json(notification.to_json()).encode()
        timestamp = int(time.time())
        headers = {
            **self.headers,
            "Content-Type": "application/json",
            "User-Agent": "waypost",
            "Waypost-Id": notification.id,
            "Waypost-Timestamp": str(timestamp),
            "Waypost-Signature": "v1=" + _signature(self._secret, timestamp, body),
        }
        request = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
        try:
            with self._opener.open(request, timeout=self.timeout) as response:
                status: int = response.status
                if not 200 <= status < 300:
                    raise self._refused(status, response.read(200))
        except urllib.error.HTTPError as e:
            with e:  # an HTTPError holds the connection open until closed
                head = e.read(200)
            raise self._refused(e.code, head) from None

    def _refused(self, status: int, head: bytes) -> DeliveryError:
        return DeliveryError(
            f"webhook {_origin(self.url)} answered {status}: {head.decode(errors='replace')!r}"
        )

    def __repr__(self) -> str:
        return f"WebhookSender({_origin(self.url)!r})"


def _origin(url: str) -> str:
    # Webhook paths are often secrets in themselves (chat webhooks); show only where it goes.
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    return f"{parts.scheme}://{host}" + (f":{parts.port}" if parts.port else "")


def _secret_bytes(secret: bytes | str) -> bytes:
    return secret.encode() if isinstance(secret, str) else bytes(secret)


def _signature(secret: bytes, timestamp: int, body: bytes) -> str:
    return hmac.new(secret, f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()


def verify_webhook(
    secret: bytes | str,
    body: bytes,
    headers: Mapping[str, str],
    *,
    tolerance: float = 300.0,
    now: float | None = None,
) -> None:
    """Check a received webhook's signature and age; raise WebhookSignatureError if bad.

    `body` must be the raw request body, before any JSON parsing. A timestamp
    more than `tolerance` seconds from `now` (either way) is refused, so a
    captured request cannot be replayed later. Header names match case-insensitively.
    """
    lowered = {k.lower(): v for k, v in headers.items()}
    raw_timestamp = lowered.get("waypost-timestamp")
    raw_signature = lowered.get("waypost-signature")
    if raw_timestamp is None or raw_signature is None:
        raise WebhookSignatureError("missing Waypost-Timestamp or Waypost-Signature header")
    try:
        timestamp = int(raw_timestamp.strip())
    except ValueError:
        raise WebhookSignatureError("Waypost-Timestamp is not an integer") from None
    expected = _signature(_secret_bytes(secret), timestamp, body)
    # Several comma-separated signatures are accepted, so a secret can be rotated.
    offered = [s.strip() for s in raw_signature.split(",")]
    if not any(
        s.startswith("v1=") and hmac.compare_digest(s[3:].encode(), expected.encode())
        for s in offered
    ):
        raise WebhookSignatureError("webhook signature does not match")
    current = time.time() if now is None else now
    if abs(current - timestamp) > tolerance:
        raise WebhookSignatureError(
            f"webhook timestamp is {current - timestamp:.0f}s from now (tolerance {tolerance:.0f}s)"
        )


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
_FORMS = (
    "'log', 'file:PATH', 'smtp://[user:pass@]host[:port][?sender=..&starttls=1]'"
    " or 'webhook+https://host/path?secret=..'"
)


def senders_from_url(spec: str) -> Sender:
    """A sender from a short spec string, as given in configuration.

    "log"; "file:/path/to/file.jsonl";
    "smtp://user:pass@host:port?sender=a@b&starttls=1" (also timeout, subject_prefix);
    "webhook+https://host/path?secret=..." or "webhook+http://..." (the secret
    parameter is taken out of the URL; the rest of the URL is posted to).
    """
    spec = spec.strip()
    if spec == "log":
        return LogSender()
    if spec.startswith("file:"):
        path = (
            urllib.parse.unquote(urllib.parse.urlsplit(spec).path)
            if spec.startswith("file://")
            else spec[5:]
        )
        if not path:
            raise ConfigurationError("notification sender 'file:' needs a path: 'file:PATH'")
        return FileSender(path)
    scheme = spec.partition(":")[0].lower() if ":" in spec else ""
    if scheme == "smtp":
        return _smtp_from_url(spec)
    if scheme in ("webhook+http", "webhook+https"):
        return _webhook_from_url(spec)
    # The spec itself is not echoed: it may hold a password or a secret.
    shown = f"scheme {scheme!r}" if scheme else "spec"
    raise ConfigurationError(f"unknown notification sender {shown}: expected {_FORMS}")


def _smtp_from_url(spec: str) -> SmtpSender:
    parts = urllib.parse.urlsplit(spec)
    try:
        port = parts.port or 25
    except ValueError:
        raise ConfigurationError("notification sender smtp:// has a bad port") from None
    if not parts.hostname:
        raise ConfigurationError("notification sender smtp:// needs a host: 'smtp://host[:port]'")
    options: dict[str, Any] = {}
    for key, value in urllib.parse.parse_qsl(parts.query, keep_blank_values=True):
        if key in ("sender", "subject_prefix"):
            options[key] = value
        elif key == "starttls":
            options[key] = _flag(key, value)
        elif key == "timeout":
            try:
                options[key] = float(value)
            except ValueError:
                raise ConfigurationError(
                    f"smtp:// timeout must be a number, not {value!r}"
                ) from None
        else:
            raise ConfigurationError(
                f"unknown smtp:// option {key!r} (known: sender, starttls, timeout, subject_prefix)"
            )
    username = urllib.parse.unquote(parts.username) if parts.username is not None else None
    password = urllib.parse.unquote(parts.password) if parts.password is not None else None
    return SmtpSender(parts.hostname, port, username=username, password=password, **options)


def _webhook_from_url(spec: str) -> WebhookSender:
    parts = urllib.parse.urlsplit(spec.partition("+")[2])
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    secrets = [value for key, value in query if key == "secret"]
    if len(secrets) != 1 or not secrets[0]:
        raise ConfigurationError("webhook sender needs exactly one non-empty ?secret=... parameter")
    if not parts.hostname:
        raise ConfigurationError(
            "webhook sender needs a host: 'webhook+https://host/path?secret=..'"
        )
    rest = urllib.parse.urlencode([(key, value) for key, value in query if key != "secret"])
    url = urllib.parse.urlunsplit(parts._replace(query=rest))
    return WebhookSender(url, secrets[0])


def _flag(key: str, value: str) -> bool:
    if value.lower() in _TRUE:
        return True
    if value.lower() in _FALSE:
        return False
    raise ConfigurationError(f"smtp:// option {key} must be 1 or 0, not {value!r}")
