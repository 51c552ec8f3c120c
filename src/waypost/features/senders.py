"""Notification senders: how an approval request reaches the person who decides it.

The engine writes each notification to a transactional outbox and, after the
commit, hands it to a `Sender` from a worker thread. A sender either delivers or
raises; any exception means "try again later", so delivery is at least once.
`Notification.id` stays the same across retries (the e-mail Message-ID and the
webhook's `webhook-id` and `Idempotency-Key` headers carry it), but each retry
carries new credentials and retires those of the copy before: a receiver that
sees an id twice keeps the later copy.

The tokens and the links that embed them are credentials: they travel only
inside the notification itself and never appear in logs, reprs or error
messages.
"""

from __future__ import annotations

import email.utils
import errno
import json
import math
import os
import smtplib
import ssl
import stat
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from email.errors import HeaderParseError
from email.headerregistry import Address
from email.message import EmailMessage
from pathlib import Path
from typing import Any, Protocol

from waypost.errors import ConfigurationError, WaypostError
from waypost.model.events import canonical_json
from waypost.model.logs import logger

from .outbound import ProtocolError, Target, exchange, origin_of, run_with_deadline
from .signing import WebhookSignatureError, secret_bytes, signature_headers, verify_webhook

log = logger("waypost.notify")

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
    The file holds tokens, so it is created readable by its owner only (0600),
    never through a symbolic link; an existing file that others may read, or
    that is not a regular file, is refused.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def send(self, notification: Notification) -> None:
        line = (
            json.dumps(notification.to_json(), sort_keys=True, ensure_ascii=False) + "\n"
        ).encode()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = self._open()
        try:
            written = os.write(fd, line)
            if written != len(line):
                # Finishing with a second write could interleave with another process.
                raise OSError(f"short write to {self.path}: {written} of {len(line)} bytes")
            os.fsync(fd)
        finally:
            os.close(fd)

    def _open(self) -> int:
        # O_NONBLOCK: a FIFO put in the file's place must not block the sender.
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(self.path, flags | os.O_NONBLOCK, 0o600)
        except OSError as exc:
            if self.path.is_symlink():
                raise ConfigurationError(
                    f"notifications file {str(self.path)!r} is a symbolic link; it is not "
                    "followed: name the file itself"
                ) from None
            if exc.errno == errno.ENXIO:  # a FIFO nobody reads
                raise ConfigurationError(
                    f"notifications file {str(self.path)!r} is not a regular file"
                ) from None
            raise
        info = os.fstat(fd)
        problem = None
        if not stat.S_ISREG(info.st_mode):
            problem = "is not a regular file"
        elif info.st_mode & 0o077:
            problem = (
                f"may be read by others (mode {stat.S_IMODE(info.st_mode):o}): it holds "
                "approval tokens; chmod 600 it"
            )
        if problem is not None:
            os.close(fd)
            raise ConfigurationError(f"notifications file {str(self.path)!r} {problem}")
        os.set_blocking(fd, True)
        return fd

    def __repr__(self) -> str:
        return f"FileSender({str(self.path)!r})"


def principal_address(principal: str) -> str | None:
    """The principal itself if it looks like an e-mail address, else None."""
    return principal if "@" in principal else None


_SUBJECTS = {"approval.requested": "Approval requested"}


def mailbox(text: str, what: str) -> str:
    """`text` as exactly one e-mail address (local@domain), else ConfigurationError.

    Refused: several addresses, a display name ("Eve <eve@example.org>"), a
    comment, line breaks, non-ASCII text: anything that could add a recipient
    or a header, or that is not a plain address.
    """
    shown = repr(text[:100].replace("\r", " ").replace("\n", " "))
    problem = f"{what} {shown} is not one e-mail address (local@domain, ASCII)"
    if not text or not text.isascii() or any(ch in text for ch in "\r\n"):
        raise ConfigurationError(problem)
    try:
        address = Address(addr_spec=text)
    except (ValueError, IndexError, HeaderParseError):
        raise ConfigurationError(problem) from None
    if address.addr_spec != text or not address.username or not address.domain:
        raise ConfigurationError(problem)
    return address.addr_spec


class SmtpSender:
    """Sends each notification as a plain-text e-mail through an SMTP server.

    The Message-ID is derived from the notification id, so a retried delivery
    carries the same Message-ID and mail systems can drop the duplicate.
    `address_of` maps an approver principal to an address (by default the
    principal itself when it contains "@"); it must be exactly one address,
    and the mail goes to that one recipient only.

    A password never travels in the clear: with `username`/`password`,
    STARTTLS is on unless `implicit_tls` is (TLS from the first byte, port 465
    by default), and the server's certificate is checked (against `tls`, a
    context with your own authorities, or the system's). Without TLS a
    password is refused when the sender is made.
    """

    def __init__(
        self,
        host: str = "localhost",
        port: int | None = None,
        *,
        sender: str = "waypost@localhost",
        address_of: Callable[[str], str | None] = principal_address,
        starttls: bool | None = None,
        implicit_tls: bool = False,
        tls: ssl.SSLContext | None = None,
        username: str | None = None,
        password: str | None = None,
        timeout: float = 10.0,
        subject_prefix: str = "[waypost]",
    ) -> None:
        credentials = username is not None or password is not None
        if starttls is None:
            starttls = credentials and not implicit_tls
        if starttls and implicit_tls:
            raise ConfigurationError("SMTP: choose STARTTLS or implicit TLS (smtps://), not both")
        if credentials and not (starttls or implicit_tls):
            raise ConfigurationError(
                "SMTP: a password is never sent without TLS; leave STARTTLS on (the default "
                "with a password) or use implicit TLS (smtps://)"
            )
        self.host = host
        self.port = port if port is not None else (465 if implicit_tls else 25)
        self.sender = mailbox(sender, "SMTP sender")
        self.address_of = address_of
        self.starttls = starttls
        self.implicit_tls = implicit_tls
        self.tls = tls
        self.username = username
        self._password = password
        self.timeout = timeout
        self.subject_prefix = subject_prefix

    def recipient(self, approver: str) -> str:
        """The approver's one address (raises if there is none, or not exactly one)."""
        to = self.address_of(approver)
        if not to:
            raise ConfigurationError(f"no e-mail address for approver {approver!r}")
        return mailbox(to, f"the address of approver {approver[:100]!r},")

    def message(self, notification: Notification) -> EmailMessage:
        """The e-mail for a notification (raises if the approver has no address)."""
        n = notification
        msg = EmailMessage()
        msg["From"] = self.sender
        msg["To"] = self.recipient(n.approver)
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
        to = self.recipient(notification.approver)
        context = self.tls or ssl.create_default_context()
        smtp: smtplib.SMTP
        if self.implicit_tls:
            smtp = smtplib.SMTP_SSL(self.host, self.port, timeout=self.timeout, context=context)
        else:
            smtp = smtplib.SMTP(self.host, self.port, timeout=self.timeout)
        with smtp:
            if self.starttls:
                smtp.ehlo()
                if not smtp.has_extn("starttls"):
                    raise DeliveryError(
                        f"SMTP server {self.host}:{self.port} does not offer STARTTLS; "
                        "nothing was sent (a password never goes in the clear)"
                    )
                smtp.starttls(context=context)
            if self.username is not None:
                smtp.login(self.username, self._password or "")
            # The envelope names the one recipient: nothing in the headers can add another.
            smtp.send_message(msg, from_addr=self.sender, to_addrs=[to])

    def __repr__(self) -> str:
        tls = (
            ", implicit_tls=True"
            if self.implicit_tls
            else ", starttls=True"
            if self.starttls
            else ""
        )
        return f"SmtpSender({self.host!r}, {self.port!r}, sender={self.sender!r}{tls})"


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
        "Each link opens the approval page, which shows this request: nothing is decided",
        "until you confirm there. A link works once, and only until the approval closes.",
        "These links are yours alone: do not forward this message.",
        "",
        f"Notification {n.id}",
    ]
    return "\n".join(lines) + "\n"


class WebhookSender:
    """POSTs each notification as canonical JSON, signed with HMAC-SHA256.

    Headers: "webhook-id" and "Idempotency-Key" (both the notification id, for
    deduplication), "webhook-timestamp" (unix seconds) and "webhook-signature"
    (over the id, timestamp, method, URL and body: see `signing.py`). Receivers
    check them with `verify_webhook(secret, body, headers, url=...)`. Redirects
    are not followed; non-2xx raises. `timeout` bounds the whole request
    (connecting, sending, the answer); `tls` replaces the system's certificate
    authorities (a private CA).
    """

    def __init__(
        self,
        url: str,
        secret: bytes | str,
        *,
        timeout: float = 10.0,
        headers: Mapping[str, str] | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        try:
            self._target = Target.parse(url)
        except ValueError as exc:
            raise ConfigurationError(f"webhook URL {exc}") from None
        self._secret = secret_bytes(secret)
        if not self._secret:
            raise ConfigurationError("webhook secret must not be empty")
        if not (timeout > 0 and math.isfinite(timeout)):
            raise ConfigurationError("webhook timeout must be a positive number of seconds")
        self.url = url
        self.timeout = timeout
        self.headers = dict(headers or {})
        self.tls = tls or ssl.create_default_context()

    def send(self, notification: Notification) -> None:
        body = canonical_json(notification.to_json()).encode()
        headers = {
            **self.headers,
            "Content-Type": "application/json",
            "User-Agent": "waypost",
            **signature_headers(
                self._secret, id=notification.id, method="POST", target=self._target, body=body
            ),
        }
        where = f"webhook {origin_of(self.url)}"
        try:
            # The timeout bounds the whole request, however slowly the receiver answers.
            response = run_with_deadline(
                exchange(self._target, "POST", headers, body, limit=0, tls=self.tls),
                self.timeout,
            )
        except TimeoutError:  # before OSError, of which it is a kind
            raise DeliveryError(f"{where}: no complete answer within {self.timeout:g}s") from None
        except (OSError, ProtocolError) as exc:
            raise DeliveryError(f"{where} failed: {exc or type(exc).__name__}") from None
        if not 200 <= response.status < 300:
            # The body is not shown: a receiver may echo the request, credentials and all.
            kind = response.headers.get_content_type() if response.body else "no body"
            raise DeliveryError(f"{where} answered {response.status} ({kind}, not shown)")

    def __repr__(self) -> str:
        return f"WebhookSender({origin_of(self.url)!r})"


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
_FORMS = (
    "'log', 'file:PATH', 'smtp://[user:pass@]host[:port][?sender=..&starttls=1]', "
    "'smtps://[user:pass@]host[:port][?sender=..]' or 'webhook+https://host/path?secret=..'"
)


def senders_from_url(spec: str) -> Sender:
    """A sender from a short spec string, as given in configuration.

    "log"; "file:/path/to/file.jsonl";
    "smtp://user:pass@host:port?sender=a@b" (STARTTLS, on by default with a password;
    also starttls=0|1, cafile, timeout, subject_prefix); "smtps://..." the same with
    TLS from the first byte (port 465 by default);
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
    if scheme in ("smtp", "smtps"):
        return _smtp_from_url(spec)
    if scheme in ("webhook+http", "webhook+https"):
        return _webhook_from_url(spec)
    # The spec itself is not echoed: it may hold a password or a secret.
    shown = f"scheme {scheme!r}" if scheme else "spec"
    raise ConfigurationError(f"unknown notification sender {shown}: expected {_FORMS}")


def _smtp_from_url(spec: str) -> SmtpSender:
    parts = urllib.parse.urlsplit(spec)
    scheme = parts.scheme.lower()  # "smtp" or "smtps" (implicit TLS)
    try:
        port = parts.port
    except ValueError:
        raise ConfigurationError(f"notification sender {scheme}:// has a bad port") from None
    if not parts.hostname:
        raise ConfigurationError(
            f"notification sender {scheme}:// needs a host: '{scheme}://host[:port]'"
        )
    options: dict[str, Any] = {}
    for key, value in urllib.parse.parse_qsl(parts.query, keep_blank_values=True):
        if key in ("sender", "subject_prefix"):
            options[key] = value
        elif key == "starttls":
            options[key] = _flag(key, value)
        elif key == "cafile":
            try:
                options["tls"] = ssl.create_default_context(cafile=value)
            except (OSError, ssl.SSLError) as exc:
                raise ConfigurationError(f"{scheme}:// cafile {value!r}: {exc}") from None
        elif key == "timeout":
            try:
                options[key] = float(value)
            except ValueError:
                raise ConfigurationError(
                    f"{scheme}:// timeout must be a number, not {value!r}"
                ) from None
        else:
            raise ConfigurationError(
                f"unknown {scheme}:// option {key!r} "
                "(known: sender, starttls, cafile, timeout, subject_prefix)"
            )
    username = urllib.parse.unquote(parts.username) if parts.username is not None else None
    password = urllib.parse.unquote(parts.password) if parts.password is not None else None
    return SmtpSender(
        parts.hostname,
        port,
        username=username,
        password=password,
        implicit_tls=scheme == "smtps",
        **options,
    )


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
