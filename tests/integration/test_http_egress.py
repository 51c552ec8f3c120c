"""Outbound calls against hostile endpoints: slow answers, floods, names that point inside.

A real local server trickles its answers one byte at a time; real engines run the
calls. Names that resolve to this machine are the DNS tricks of the attacks.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import ssl
import threading
import time
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

import waypost as wp
from tests.helpers import eventually
from tests.helpers.http_server import serving
from tests.helpers.http_steps import http_attempt
from tests.helpers.mail import approval_notification
from waypost.features.egress import AllowList, is_public
from waypost.features.http import (
    HTTP_ACTIVITY,
    HttpStepError,
    HttpStepRetryable,
    make_http_activity,
)
from waypost.features.senders import DeliveryError, WebhookSender

pytestmark = pytest.mark.timeout(120)

TRICKLE_FOR = 60.0  # seconds a trickling answer goes on if nobody hangs up


class SlowServer:
    """Answers /fast/... at once, /slow/... one body byte every 0.1 s and /drip/... one
    header byte every 0.1 s, counting open calls."""

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self.lock = threading.Lock()
        self.open: Counter[str] = Counter()  # by first path segment
        self.most: Counter[str] = Counter()
        self.served: list[str] = []
        self.hung_up = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                group = self.path.split("/")[1]
                with server.lock:
                    server.served.append(self.path)
                    server.open[group] += 1
                    server.most[group] = max(server.most[group], server.open[group])
                try:
                    if self.path.startswith("/slow"):
                        self._trickle()
                    elif self.path.startswith("/drip"):
                        self._trickle(head_too=True)
                    else:
                        self.send_response(200)
                        self.send_header("Content-Length", "2")
                        self.end_headers()
                        self.wfile.write(b"ok")
                finally:
                    with server.lock:
                        server.open[group] -= 1

            def _trickle(self, head_too: bool = False) -> None:
                if head_too:  # the status line, then a header that never ends
                    self.wfile.write(b"HTTP/1.1 200 OK\r\nX-Padding: ")
                else:
                    self.send_response(200)
                    self.send_header("Content-Length", "1000000")
                    self.end_headers()
                ends = time.monotonic() + TRICKLE_FOR
                try:
                    while time.monotonic() < ends:
                        self.wfile.write(b"x")
                        self.wfile.flush()
                        time.sleep(0.1)  # the attack itself: a byte at a time
                except OSError:
                    server.hung_up.set()  # the client closed the connection

            do_GET = do_POST = _handle

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.httpd.block_on_close = False
        if tls is not None:
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        self.base = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    def now_open(self, group: str) -> int:
        with self.lock:
            return self.open[group]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join()


@pytest.fixture
def slow() -> Iterator[SlowServer]:
    yield from serving(SlowServer())


TLS_DIR = Path(__file__).parent.parent / "data" / "tls"


@pytest.fixture
def tls_server() -> Iterator[SlowServer]:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(TLS_DIR / "server.pem")
    yield from serving(SlowServer(context))


@pytest.mark.parametrize("path", ["/slow/1", "/drip/1"])
def test_a_trickling_answer_is_cut_off_at_the_requests_deadline(
    slow: SlowServer, path: str
) -> None:
    call = make_http_activity(allow=["127.0.0.1"])
    started = time.monotonic()
    with pytest.raises(HttpStepRetryable, match="within the step's timeout of 1s"):
        asyncio.run(call(http_attempt(), {"url": f"{slow.base}{path}", "timeout": 1}))
    assert time.monotonic() - started < 5
    assert slow.hung_up.wait(5)  # the connection is closed, nothing goes on reading
    group = path.split("/")[1]
    eventually(lambda: slow.now_open(group) == 0, "the server to see the call end")


@wp.workflow(name="call_http")
async def call_http(ctx: wp.WorkflowContext, requests: list[dict[str, Any]]) -> list[Any]:
    return [await ctx.run(HTTP_ACTIVITY, request) for request in requests]


@wp.activity(name="ping")
def ping(ctx: wp.ActivityContext) -> str:
    return "pong"


@wp.workflow(name="ping_twice")
async def ping_twice(ctx: wp.WorkflowContext) -> list[str]:
    return [await ctx.run(ping), await ctx.run(ping)]


def test_one_tenants_slow_calls_do_not_delay_another_tenants_work(
    sqlite_url: str, slow: SlowServer
) -> None:
    # One activity thread for every tenant, as a busy engine would have: a flood of
    # slow calls from acme must hold none of it, and acme gets at most 2 calls at once.
    engine = wp.Engine(
        sqlite_url,
        lease=5.0,
        poll_interval=0.05,
        shutdown_grace=0.5,
        activity_threads=1,
        max_activities=20,
    )
    engine.register(
        call_http,
        ping_twice,
        ping,
        make_http_activity(allow=["127.0.0.1"], max_calls_per_tenant=2),
    )
    with engine.running():
        flood = [
            engine.start(
                call_http, [{"url": f"{slow.base}/slow/{i}", "timeout": 20}], tenant="acme"
            )
            for i in range(6)
        ]
        eventually(lambda: slow.now_open("slow") == 2, "acme's calls to start", timeout=10)
        started = time.monotonic()
        other = engine.start(ping_twice, tenant="globex")
        assert other.result(timeout=5) == ["pong", "pong"]
        hook = engine.start(call_http, [{"url": f"{slow.base}/fast/globex"}], tenant="globex")
        assert hook.result(timeout=5) == ["ok"]
        assert time.monotonic() - started < 5
        assert slow.now_open("slow") == 2  # acme's calls still trickle, two at a time
        assert all(run.get().status == wp.RunStatus.RUNNING for run in flood)
    engine.close()
    assert slow.most["slow"] == 2


def test_one_tenants_slow_name_lookups_do_not_hold_the_threads_others_need(
    slow: SlowServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # slow.example takes the system resolver "for ever" (until the test lets it go); a
    # lookup cannot be interrupted, so its thread stays taken after the call gives up.
    real = socket.getaddrinfo
    stuck = threading.Event()
    waiting: list[str] = []

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host == "slow.example":
            waiting.append(host)
            stuck.wait(30)
        return real("127.0.0.1" if host.endswith(".example") else host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    call = make_http_activity(allow=["*.example", "127.0.0.1"])

    async def scenario() -> None:
        flood = [
            asyncio.create_task(
                call(
                    http_attempt("acme", f"k{i}"),
                    {"url": f"http://slow.example:{slow.port}/fast/a", "timeout": 0.5},
                )
            )
            for i in range(12)
        ]
        for task in flood:
            with pytest.raises(HttpStepRetryable, match="timeout"):
                await task
        # acme's lookups still hold their threads; globex's name is looked up at once.
        started = time.monotonic()
        url = f"http://fast.example:{slow.port}/fast/b"
        assert await call(http_attempt("globex"), {"url": url}) == "ok"
        assert time.monotonic() - started < 2

    try:
        asyncio.run(scenario())
        assert len(waiting) <= 2  # acme never had more than its share of lookups running
    finally:
        stuck.set()


def test_a_webhook_that_trickles_is_given_up_at_the_senders_timeout(slow: SlowServer) -> None:
    sender = WebhookSender(f"{slow.base}/drip/hook", "s3cret", timeout=1.0)
    started = time.monotonic()
    with pytest.raises(DeliveryError, match="no complete answer within 1s"):
        sender.send(approval_notification("ann@example.org", "t"))
    assert time.monotonic() - started < 5
    assert slow.hung_up.wait(5)


# -- names and addresses ------------------------------------------------------------------


def test_a_name_resolving_to_a_loopback_address_is_refused_unless_the_address_is_allowed(
    slow: SlowServer,
) -> None:
    url = f"http://localhost:{slow.port}/fast/1"
    named_only = make_http_activity(allow=[f"localhost:{slow.port}"])
    with pytest.raises(HttpStepError) as caught:
        asyncio.run(named_only(http_attempt(), {"url": url}))
    message = str(caught.value)
    assert "localhost" in message and "127.0.0.1" in message and "http_allow" in message
    assert slow.served == []

    for extra in ("127.0.0.1", "127.0.0.0/8", f"127.0.0.1:{slow.port}"):
        call = make_http_activity(allow=[f"localhost:{slow.port}", extra])
        assert asyncio.run(call(http_attempt(), {"url": url})) == "ok"
    assert len(slow.served) == 3


def test_the_connection_goes_to_the_address_that_was_checked(
    slow: SlowServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A rebinding name: the first answer is an allowed address, later ones point elsewhere
    # (127.0.0.2, where nothing listens). Only one resolution may happen.
    real = socket.getaddrinfo
    asked: list[str] = []

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host == "rebind.example":
            asked.append(host)
            host = "127.0.0.1" if len(asked) == 1 else "127.0.0.2"
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    call = make_http_activity(allow=["rebind.example", "127.0.0.1"])
    url = f"http://rebind.example:{slow.port}/fast/1"
    assert asyncio.run(call(http_attempt(), {"url": url})) == "ok"
    assert asked == ["rebind.example"]


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "127.255.0.9",
        "::1",
        "10.1.2.3",
        "172.16.0.1",
        "172.31.255.255",
        "192.168.1.1",
        "169.254.169.254",
        "0.0.0.0",
        "::",
        "100.64.0.1",
        "fc00::1",
        "fd12:3456::1",
        "fe80::1",
        "::ffff:127.0.0.1",
        "::ffff:10.0.0.1",
        "2002:7f00:1::",  # 6to4 of 127.0.0.1
        "64:ff9b::a00:1",  # NAT64 of 10.0.0.1
        "224.0.0.1",
        "255.255.255.255",
    ],
)
def test_non_public_addresses_need_an_explicit_entry(address: str) -> None:
    assert not is_public(ipaddress.ip_address(address))
    assert not AllowList(["*", "*.example.com"]).permits(address, 443)
    network = "0.0.0.0/0" if "." in address and ":" not in address else "::/0"
    assert AllowList([network]).permits(address, 443)


def test_public_addresses_are_permitted_for_an_allowed_name() -> None:
    allowed = AllowList(["api.example.com"])
    for address in ("93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946", "8.8.8.8"):
        assert allowed.permits(address, 443)
    assert allowed.admits("api.example.com", 443)
    assert not allowed.admits("93.184.216.34", 443)  # an address literal needs its own entry
    assert AllowList(["93.184.216.0/24"]).admits("93.184.216.34", 443)
    assert AllowList(["[2606:2800:220:1::1]:443"]).admits("2606:2800:220:1::1", 443)
    assert not AllowList(["[2606:2800:220:1::1]:443"]).admits("2606:2800:220:1::1", 80)


def test_https_checks_the_certificate_for_the_name_while_connecting_to_the_checked_address(
    tls_server: SlowServer,
) -> None:
    trusted = ssl.create_default_context(cafile=str(TLS_DIR / "ca.pem"))
    url = f"https://localhost:{tls_server.port}/fast/1"
    call = make_http_activity(allow=["localhost", "127.0.0.1"], tls=trusted)
    assert asyncio.run(call(http_attempt(), {"url": url})) == "ok"
    untrusting = make_http_activity(allow=["localhost", "127.0.0.1"])  # the system's CAs
    with pytest.raises(HttpStepRetryable, match="TLS certificate not accepted"):
        asyncio.run(untrusting(http_attempt(), {"url": url}))
    assert tls_server.served == ["/fast/1"]
