"""Notification senders against real receivers: a shared file, a log, an SMTP server, an HTTP server."""

from __future__ import annotations

import asyncio
import contextlib
import email
import email.policy
import json
import logging
import os
import smtplib
import ssl
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, cast

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP as SMTPServer, AuthResult, Envelope, LoginPassword, Session

from waypost.errors import ConfigurationError
from waypost.features.senders import (
    DeliveryError,
    FileSender,
    LogSender,
    Notification,
    SmtpSender,
    WebhookSender,
    WebhookSignatureError,
    senders_from_url,
    verify_webhook,
)
from waypost.model.events import canonical_json

APPROVE_TOKEN = "apv-9d1c6e0b7f"
REJECT_TOKEN = "rej-4a22f8c1e3"
APPROVE_URL = f"https://approvals.example.org/approve/{APPROVE_TOKEN}"
REJECT_URL = f"https://approvals.example.org/approve/{REJECT_TOKEN}"
SECRET = b"whsec-test-0123456789"


def notification(id: str = "ntf-1", **changes: Any) -> Notification:
    base = Notification(
        id=id,
        kind="approval.requested",
        tenant="acme",
        approval_id="a-1",
        run_id="run-42",
        step="approve-refund",
        name="manager",
        approver="alice@example.org",
        expires_at=1_700_000_000.0,
        approve_token=APPROVE_TOKEN,
        reject_token=REJECT_TOKEN,
        approve_url=APPROVE_URL,
        reject_url=REJECT_URL,
        data={"amount": 120, "currency": "EUR"},
    )
    return replace(base, **changes)


# -- Notification ---------------------------------------------------------------------------


def test_to_json_has_every_field_and_the_expiry_in_iso_utc() -> None:
    out = notification().to_json()
    assert out["expires"] == "2023-11-14T22:13:20+00:00"
    assert out["expires_at"] == 1_700_000_000.0
    assert out["approve_token"] == APPROVE_TOKEN
    assert out["reject_url"] == REJECT_URL
    assert out["data"] == {"amount": 120, "currency": "EUR"}
    assert set(out) == {
        "id",
        "kind",
        "tenant",
        "approval_id",
        "run_id",
        "step",
        "name",
        "approver",
        "expires_at",
        "expires",
        "approve_token",
        "reject_token",
        "approve_url",
        "reject_url",
        "data",
    }
    json.dumps(out)


def test_repr_of_a_notification_holds_no_credentials() -> None:
    text = repr(notification())
    assert "ntf-1" in text
    for secret in (APPROVE_TOKEN, REJECT_TOKEN, APPROVE_URL, REJECT_URL):
        assert secret not in text


# -- LogSender ------------------------------------------------------------------------------


def test_log_sender_logs_who_and_what_but_not_the_tokens_or_links(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="waypost.notify")
    LogSender().send(notification())
    records = [r for r in caplog.records if r.name == "waypost.notify"]
    assert len(records) == 1
    assert records[0].levelno == logging.INFO
    message = records[0].getMessage()
    for expected in ("ntf-1", "alice@example.org", "a-1", "run-42", "approve-refund", "2023-11-14"):
        assert expected in message
    assert "withheld" in message
    for secret in (APPROVE_TOKEN, REJECT_TOKEN, APPROVE_URL, REJECT_URL, "approvals.example.org"):
        assert secret not in caplog.text


# -- FileSender -----------------------------------------------------------------------------

_APPENDER = textwrap.dedent(
    """
    import sys
    from waypost.features.senders import FileSender, Notification

    tag, path = sys.argv[1], sys.argv[2]
    sender = FileSender(path)
    sys.stdin.readline()  # start together
    for i in range(200):
        sender.send(Notification(
            id=f"{tag}-{i}", kind="approval.requested", tenant="t", approval_id=f"a-{i}",
            run_id="r", step="s", name="manager", approver="alice@example.org",
            expires_at=1e9, approve_token="x", reject_token="y",
            approve_url="https://e/a", reject_url="https://e/r",
            # Lines of 100 kB: one written in pieces would be interleaved.
            data={"pad": tag * 100_000},
        ))
    """
)


def test_file_sender_lines_from_two_processes_never_interleave(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "dir" / "outbox.jsonl"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _APPENDER, tag, str(path)],
            stdin=subprocess.PIPE,
            text=True,
        )
        for tag in ("p", "q")
    ]
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.close()
    for proc in procs:
        assert proc.wait(timeout=120) == 0

    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b""
    rows = [json.loads(line) for line in lines[:-1]]
    ids = [row["id"] for row in rows]
    assert len(ids) == 400
    assert set(ids) == {f"{tag}-{i}" for tag in ("p", "q") for i in range(200)}
    assert all(row["data"]["pad"] == row["id"][0] * 100_000 for row in rows)
    assert os.stat(path).st_mode & 0o777 == 0o600


def test_file_sender_writes_sorted_keys_and_appends(tmp_path: Path) -> None:
    path = tmp_path / "outbox.jsonl"
    path.write_text('{"earlier": true}\n')
    path.chmod(0o600)
    FileSender(path).send(notification())
    lines = path.read_text().splitlines()
    assert lines[0] == '{"earlier": true}'
    row = json.loads(lines[1])
    assert row == notification().to_json()
    assert list(row) == sorted(row)


# -- SmtpSender -----------------------------------------------------------------------------


@dataclass
class Inbox:
    envelopes: list[Envelope] = field(default_factory=list)
    logins: list[tuple[bytes, bytes]] = field(default_factory=list)
    logins_in_clear: int = 0

    async def handle_DATA(self, server: SMTPServer, session: Session, envelope: Envelope) -> str:
        self.envelopes.append(envelope)
        return "250 OK"

    def authenticate(
        self,
        server: SMTPServer,
        session: Session,
        envelope: Envelope,
        mechanism: str,
        auth_data: Any,
    ) -> AuthResult:
        assert isinstance(auth_data, LoginPassword)
        self.logins.append((auth_data.login, auth_data.password))
        if server.transport is None or server.transport.get_extra_info("ssl_object") is None:
            self.logins_in_clear += 1
        ok = (auth_data.login, auth_data.password) == (b"bob", b"p@ss:w/rd")
        return AuthResult(success=ok, handled=False, auth_data=auth_data)

    def message(self, index: int = -1) -> email.message.EmailMessage:
        content = self.envelopes[index].content
        assert isinstance(content, bytes)
        msg = email.message_from_bytes(content, policy=email.policy.default)
        assert isinstance(msg, email.message.EmailMessage)
        return msg


class _EphemeralPortController(Controller):
    # Controller connects to self.port once started; with port 0 learn the real one first.
    def _trigger_server(self) -> None:
        server = cast("asyncio.Server", self.server)
        self.port = server.sockets[0].getsockname()[1]
        super()._trigger_server()  # type: ignore[no-untyped-call]


TLS_DIR = Path(__file__).parent.parent / "data" / "tls"
CA_FILE = TLS_DIR / "ca.pem"  # the test CA; server.pem is its certificate for 127.0.0.1


def server_tls() -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(TLS_DIR / "server.pem")
    return context


def client_tls() -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(CA_FILE))


@contextlib.contextmanager
def running_smtp(**options: Any) -> Iterator[tuple[Inbox, int]]:
    inbox = Inbox()
    controller = _EphemeralPortController(
        inbox, hostname="127.0.0.1", port=0, authenticator=inbox.authenticate, **options
    )
    controller.start()
    try:
        yield inbox, controller.port
    finally:
        controller.stop()


@pytest.fixture
def smtp_server() -> Iterator[tuple[Inbox, int]]:
    """A server without TLS that would take a password in the clear."""
    with running_smtp(auth_require_tls=False) as server:
        yield server


@pytest.fixture
def starttls_server() -> Iterator[tuple[Inbox, int]]:
    """A server that offers STARTTLS and takes a password only after it."""
    with running_smtp(tls_context=server_tls(), auth_require_tls=True) as server:
        yield server


@pytest.fixture
def smtps_server() -> Iterator[tuple[Inbox, int]]:
    """A server speaking TLS from the first byte (implicit TLS, port 465 style)."""
    with running_smtp(ssl_context=server_tls(), auth_require_tls=False) as server:
        yield server


def test_smtp_sender_delivers_to_the_approver(smtp_server: tuple[Inbox, int]) -> None:
    inbox, port = smtp_server
    sender = SmtpSender("127.0.0.1", port, sender="workflows@example.org")
    n = notification(id="ntf:42.1")
    sender.send(n)

    assert len(inbox.envelopes) == 1
    envelope = inbox.envelopes[0]
    assert envelope.mail_from == "workflows@example.org"
    assert envelope.rcpt_tos == ["alice@example.org"]
    msg = inbox.message()
    assert msg["To"] == "alice@example.org"
    assert msg["From"] == "workflows@example.org"
    assert msg["Subject"] == "[waypost] Approval requested: manager for run run-42"
    assert msg["Message-ID"] == "<waypost.ntf%3A42%2E1@example.org>"
    assert msg.get_content_type() == "text/plain"
    body = msg.get_content()
    assert APPROVE_URL in body
    assert REJECT_URL in body
    assert "2023-11-14T22:13:20+00:00" in body
    assert "manager" in body
    assert '"amount": 120' in body


def test_smtp_retry_carries_the_same_message_id(smtp_server: tuple[Inbox, int]) -> None:
    inbox, port = smtp_server
    sender = SmtpSender("127.0.0.1", port)
    sender.send(notification(id="ntf-7"))
    sender.send(notification(id="ntf-7"))
    sender.send(notification(id="ntf-8"))
    ids = [inbox.message(i)["Message-ID"] for i in range(3)]
    assert ids[0] == ids[1] != ids[2]


def test_smtp_uses_address_of_and_refuses_an_approver_without_address(
    smtp_server: tuple[Inbox, int],
) -> None:
    inbox, port = smtp_server
    directory = {"u-alice": "alice@corp.example.org"}
    sender = SmtpSender("127.0.0.1", port, address_of=directory.get)
    sender.send(notification(approver="u-alice"))
    assert inbox.envelopes[-1].rcpt_tos == ["alice@corp.example.org"]

    with pytest.raises(ConfigurationError, match="no e-mail address for approver 'u-bob'"):
        sender.send(notification(approver="u-bob"))
    with pytest.raises(ConfigurationError, match="no e-mail address for approver 'bob'"):
        SmtpSender("127.0.0.1", port).send(notification(approver="bob"))
    assert len(inbox.envelopes) == 1


def test_a_password_is_never_sent_without_tls(smtp_server: tuple[Inbox, int]) -> None:
    inbox, port = smtp_server
    # STARTTLS is the default with a password; this server does not offer it.
    sender = senders_from_url(f"smtp://bob:p%40ss%3Aw%2Frd@127.0.0.1:{port}")
    with pytest.raises(DeliveryError, match="STARTTLS"):
        sender.send(notification())
    assert inbox.logins == [] and inbox.envelopes == []
    for spec in (
        f"smtp://bob:p%40ss@127.0.0.1:{port}?starttls=0",
        f"smtps://bob:p%40ss@127.0.0.1:{port}?starttls=1",
    ):
        with pytest.raises(ConfigurationError) as caught:
            senders_from_url(spec)
        assert "p@ss" not in str(caught.value)
    with pytest.raises(ConfigurationError, match="TLS"):
        SmtpSender("127.0.0.1", port, username="bob", password="x", starttls=False)


def test_starttls_comes_first_and_then_the_login(starttls_server: tuple[Inbox, int]) -> None:
    inbox, port = starttls_server
    sender = senders_from_url(
        f"smtp://bob:p%40ss%3Aw%2Frd@127.0.0.1:{port}?sender=wf@example.org&cafile={CA_FILE}"
    )
    sender.send(notification())
    assert inbox.logins == [(b"bob", b"p@ss:w/rd")] and inbox.logins_in_clear == 0
    assert inbox.envelopes[0].mail_from == "wf@example.org"

    wrong = SmtpSender("127.0.0.1", port, username="bob", password="guess", tls=client_tls())
    with pytest.raises(smtplib.SMTPAuthenticationError):
        wrong.send(notification())
    assert len(inbox.envelopes) == 1


def test_a_server_certificate_that_is_not_trusted_is_refused(
    starttls_server: tuple[Inbox, int],
) -> None:
    inbox, port = starttls_server
    sender = SmtpSender("127.0.0.1", port, username="bob", password="p@ss:w/rd")
    with pytest.raises(ssl.SSLCertVerificationError):
        sender.send(notification())  # the system's authorities do not know the test CA
    assert inbox.logins == []


def test_smtps_speaks_tls_from_the_start(smtps_server: tuple[Inbox, int]) -> None:
    inbox, port = smtps_server
    sender = senders_from_url(f"smtps://bob:p%40ss%3Aw%2Frd@127.0.0.1:{port}?cafile={CA_FILE}")
    assert isinstance(sender, SmtpSender) and sender.implicit_tls and not sender.starttls
    sender.send(notification())
    assert inbox.logins == [(b"bob", b"p@ss:w/rd")] and inbox.logins_in_clear == 0
    assert inbox.envelopes[0].rcpt_tos == ["alice@example.org"]
    assert SmtpSender("mail.example.org", implicit_tls=True).port == 465


@pytest.mark.parametrize(
    "address",
    [
        "alice@example.org, eve@evil.example",
        "alice@example.org,eve@evil.example",
        "Eve <eve@evil.example>",
        "alice@example.org <eve@evil.example>",
        "alice@example.org\r\nBcc: eve@evil.example",
        "alice@example.org\nBcc: eve@evil.example",
        "alice@example.org (comment)",
        "alice@example.org;eve@evil.example",
        "alice",
        "@evil.example",
        "alice@",
        "al\u00efce@example.org",
    ],
)
def test_an_approver_address_must_be_exactly_one_mailbox(
    smtp_server: tuple[Inbox, int], address: str
) -> None:
    inbox, port = smtp_server
    sender = SmtpSender("127.0.0.1", port, address_of=lambda who: address)
    with pytest.raises(ConfigurationError, match="one e-mail address") as caught:
        sender.send(notification())
    assert "\n" not in str(caught.value)
    assert inbox.envelopes == []
    # The default: the approver's own name when it looks like an address.
    with pytest.raises(ConfigurationError):
        SmtpSender("127.0.0.1", port).send(notification(approver=address))
    assert inbox.envelopes == []


def test_one_valid_mailbox_gets_exactly_one_envelope_recipient(
    smtp_server: tuple[Inbox, int],
) -> None:
    inbox, port = smtp_server
    quoted = '"alice,smith"@example.org'
    SmtpSender("127.0.0.1", port, address_of=lambda who: quoted).send(notification())
    assert inbox.envelopes[0].rcpt_tos == [quoted]
    assert inbox.message()["To"] == quoted


def test_the_sender_address_is_checked_when_configured() -> None:
    for bad in ("wf@example.org, eve@evil.example", "Waypost <wf@example.org>", "wf"):
        with pytest.raises(ConfigurationError, match="one e-mail address"):
            SmtpSender("localhost", sender=bad)


# -- WebhookSender --------------------------------------------------------------------------


@dataclass
class Received:
    body: bytes
    headers: dict[str, str]
    verified: bool


class Receiver(ThreadingHTTPServer):
    status = 204
    response = b""
    location = ""
    received: list[Received]


class _Hook(BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        headers = dict(self.headers.items())
        host, port = self.server.server_address[:2]
        try:
            verify_webhook(SECRET, body, headers, url=f"http://{host!s}:{port}{self.path}")
            verified = True
        except WebhookSignatureError:
            verified = False
        self.server.received.append(Received(body, headers, verified))
        status = self.server.status if verified else 401
        self.send_response(status)
        if self.server.location:
            self.send_header("Location", self.server.location)
        self.send_header("Content-Length", str(len(self.server.response)))
        self.end_headers()
        self.wfile.write(self.server.response)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def receiver(monkeypatch: pytest.MonkeyPatch) -> Iterator[Receiver]:
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    server = Receiver(("127.0.0.1", 0), _Hook)
    server.received = []
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _url(server: Receiver, path: str = "/hooks/s3cr3t-path") -> str:
    host, port = server.server_address[:2]
    return f"http://{host!s}:{port}{path}"


def test_webhook_is_signed_and_the_receiver_verifies_it(receiver: Receiver) -> None:
    n = notification()
    WebhookSender(_url(receiver), SECRET, headers={"X-Team": "payments"}).send(n)

    [got] = receiver.received
    assert got.verified
    assert got.body == canonical_json(n.to_json()).encode()
    assert json.loads(got.body) == n.to_json()
    headers = {k.lower(): v for k, v in got.headers.items()}
    assert headers["content-type"] == "application/json"
    assert headers["webhook-id"] == headers["idempotency-key"] == "ntf-1"
    assert headers["webhook-signature"].startswith("wp1,")
    assert headers["x-team"] == "payments"


def test_a_captured_webhook_cannot_be_replayed_elsewhere_or_as_another_delivery(
    receiver: Receiver,
) -> None:
    url = _url(receiver)
    WebhookSender(url, SECRET).send(notification())
    [got] = receiver.received
    assert got.verified
    headers = {k.lower(): v for k, v in got.headers.items()}
    ts = int(headers["webhook-timestamp"])
    verify_webhook(SECRET, got.body, headers, url=url, now=ts)
    verify_webhook(SECRET, got.body, headers, url=url.replace("http://", "HTTP://"), now=ts)

    port = receiver.server_address[1]
    for elsewhere in (
        _url(receiver, "/hooks/another-endpoint"),
        url + "?replayed=1",
        url.replace(f":{port}", f":{port + 1}"),
        url.replace("http://", "https://"),
    ):
        with pytest.raises(WebhookSignatureError, match="signature"):
            verify_webhook(SECRET, got.body, headers, url=elsewhere, now=ts)
    with pytest.raises(WebhookSignatureError, match="signature"):
        verify_webhook(SECRET, got.body, headers, url=url, method="PUT", now=ts)
    renamed = {**headers, "webhook-id": "ntf-2", "idempotency-key": "ntf-2"}
    with pytest.raises(WebhookSignatureError, match="signature"):
        verify_webhook(SECRET, got.body, renamed, url=url, now=ts)
    rekeyed = {**headers, "idempotency-key": "a-fresh-key"}
    with pytest.raises(WebhookSignatureError, match="Idempotency-Key"):
        verify_webhook(SECRET, got.body, rekeyed, url=url, now=ts)


def test_verify_webhook_refuses_tampering_wrong_secret_and_replay(receiver: Receiver) -> None:
    url = _url(receiver)
    WebhookSender(url, SECRET.decode()).send(notification())
    [got] = receiver.received
    ts = int(got.headers["webhook-timestamp"])

    verify_webhook(SECRET, got.body, got.headers, url=url, now=ts + 299)
    lowered = {k.lower(): v for k, v in got.headers.items()}
    verify_webhook(SECRET.decode(), got.body, lowered, url=url, now=ts)

    tampered = got.body.replace(b'"manager"', b'"intern"')
    assert tampered != got.body
    with pytest.raises(WebhookSignatureError, match="signature"):
        verify_webhook(SECRET, tampered, got.headers, url=url, now=ts)
    with pytest.raises(WebhookSignatureError, match="signature"):
        verify_webhook(b"another-secret", got.body, got.headers, url=url, now=ts)
    with pytest.raises(WebhookSignatureError, match="timestamp"):
        verify_webhook(SECRET, got.body, got.headers, url=url, now=ts + 301)
    with pytest.raises(WebhookSignatureError, match="timestamp"):
        verify_webhook(SECRET, got.body, got.headers, url=url, now=ts - 3600)
    # Moving the timestamp forward breaks the signature, so replays cannot be refreshed.
    refreshed = {**lowered, "webhook-timestamp": str(ts + 3600)}
    with pytest.raises(WebhookSignatureError, match="signature"):
        verify_webhook(SECRET, got.body, refreshed, url=url, now=ts + 3600)
    for missing in ("webhook-signature", "webhook-timestamp", "webhook-id"):
        partial = {k: v for k, v in lowered.items() if k != missing}
        with pytest.raises(WebhookSignatureError, match="missing"):
            verify_webhook(SECRET, got.body, partial, url=url, now=ts)
    # Several signatures (a secret being rotated): any one that matches will do.
    rotated = {**lowered, "webhook-signature": "wp1,b2xk " + lowered["webhook-signature"]}
    verify_webhook(SECRET, got.body, rotated, url=url, now=ts)
    # The scheme of earlier releases (timestamp and body only) is not accepted.
    old = {"Waypost-Timestamp": str(ts), "Waypost-Signature": "v1=00"}
    with pytest.raises(WebhookSignatureError, match="missing"):
        verify_webhook(SECRET, got.body, old, url=url, now=ts)
    assert issubclass(WebhookSignatureError, ValueError)


def test_webhook_error_status_raises_with_the_status_but_not_the_body(receiver: Receiver) -> None:
    receiver.status = 500
    receiver.response = b"x" * 150 + APPROVE_TOKEN.encode()  # a receiver that echoes
    with pytest.raises(DeliveryError, match="500") as info:
        WebhookSender(_url(receiver), SECRET).send(notification())
    message = str(info.value)
    assert "x" * 10 not in message and APPROVE_TOKEN not in message
    assert "not shown" in message
    assert "s3cr3t-path" not in message
    assert len(receiver.received) == 1


def test_webhook_signed_with_another_secret_is_refused_by_the_receiver(
    receiver: Receiver,
) -> None:
    with pytest.raises(DeliveryError, match="401"):
        WebhookSender(_url(receiver), b"not-the-secret").send(notification())


def test_webhook_redirect_is_not_followed(receiver: Receiver) -> None:
    receiver.status = 302
    receiver.location = _url(receiver, "/elsewhere")
    with pytest.raises(DeliveryError, match="302"):
        WebhookSender(_url(receiver), SECRET).send(notification())
    assert len(receiver.received) == 1


# -- senders_from_url -----------------------------------------------------------------------


def test_from_url_log() -> None:
    assert isinstance(senders_from_url("log"), LogSender)


def test_from_url_file(tmp_path: Path) -> None:
    sender = senders_from_url(f"file:{tmp_path}/out/n.jsonl")
    assert isinstance(sender, FileSender)
    assert sender.path == tmp_path / "out" / "n.jsonl"
    sender.send(notification())
    assert json.loads((tmp_path / "out" / "n.jsonl").read_text())["id"] == "ntf-1"

    other = senders_from_url(f"file://{tmp_path}/n.jsonl")
    assert isinstance(other, FileSender)
    assert other.path == tmp_path / "n.jsonl"


def test_from_url_smtp() -> None:
    sender = senders_from_url(
        "smtp://bob:secret@mail.example.org:587?sender=wf@example.org&starttls=1&timeout=3"
    )
    assert isinstance(sender, SmtpSender)
    assert (sender.host, sender.port, sender.sender) == ("mail.example.org", 587, "wf@example.org")
    assert sender.starttls is True
    assert sender.username == "bob"
    assert sender.timeout == 3.0
    assert "secret" not in repr(sender)

    plain = senders_from_url("smtp://localhost")
    assert isinstance(plain, SmtpSender)
    assert (plain.port, plain.sender, plain.starttls, plain.username) == (
        25,
        "waypost@localhost",
        False,
        None,
    )


def test_from_url_webhook(receiver: Receiver) -> None:
    sender = senders_from_url("webhook+https://hooks.example.org/in?team=pay&secret=s3")
    assert isinstance(sender, WebhookSender)
    assert sender.url == "https://hooks.example.org/in?team=pay"

    local = senders_from_url(f"webhook+{_url(receiver)}?secret={SECRET.decode()}")
    assert isinstance(local, WebhookSender)
    local.send(notification())
    [got] = receiver.received
    assert got.verified


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("", "unknown notification sender"),
        ("logs", "unknown notification sender"),
        ("ftp://user:hunter2@host/x", "unknown notification sender scheme 'ftp'"),
        ("webhook+ftp://host/x?secret=a", "unknown notification sender"),
        ("file:", "needs a path"),
        ("smtp://", "needs a host"),
        ("smtp://host:99999", "bad port"),
        ("smtp://user:hunter2@host?bogus=1", "unknown smtp:// option 'bogus'"),
        ("smtp://host?starttls=maybe", "starttls must be 1 or 0"),
        ("smtp://host?timeout=soon", "timeout must be a number"),
        ("webhook+https://host/path", "secret"),
        ("webhook+https://host/path?secret=", "secret"),
        ("webhook+https:///path?secret=hunter2", "needs a host"),
    ],
)
def test_from_url_refuses_bad_specs(spec: str, match: str) -> None:
    with pytest.raises(ConfigurationError, match=match) as info:
        senders_from_url(spec)
    assert "hunter2" not in str(info.value)


def test_webhook_sender_refuses_bad_configuration() -> None:
    with pytest.raises(ConfigurationError, match="secret"):
        WebhookSender("https://hooks.example.org/", b"")
    with pytest.raises(ConfigurationError, match="http"):
        WebhookSender("ftp://hooks.example.org/", b"s")
