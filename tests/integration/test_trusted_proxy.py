"""Behind a proxy, on both stores: `X-Forwarded-*` believed only from trusted proxies (the
client's address, https for cookies, HSTS and the console's Origin check), and the
headers every answer carries. Real HTTP through the ASGI app, from chosen peer addresses.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest

from waypost.client.engine import AsyncEngine
from waypost.model import operations as ops
from waypost.server.app import create_app
from waypost.server.proxies import TrustedProxies

pytestmark = pytest.mark.timeout(120)

PROXY = "10.0.0.5"  # the peer the app sees: the proxy
HOST = "console.example"
CSRF = re.compile(r'name="csrf" value="([^"]+)"')
PASSWORD = "correct horse battery"


async def _site(
    db_url: str,
    check: Callable[[AsyncEngine, str, Callable[..., httpx.AsyncClient]], Awaitable[None]],
    *,
    trusted: list[str] | None = None,
) -> None:
    async with AsyncEngine(db_url) as engine:
        local = engine.local("acme")
        await engine.execute(ops.CreateTenant(tenant="acme"), local)
        new = await engine.execute(ops.CreateKey(principal="olga", roles=["operator"]), local)
        await engine.create_user("rita", ["operator"], PASSWORD, tenant="acme")
        proxies = TrustedProxies.parse(trusted) if trusted else None
        app = create_app(engine, trusted_proxies=proxies)

        def client(peer: str = PROXY, scheme: str = "http", **options: Any) -> httpx.AsyncClient:
            transport = httpx.ASGITransport(app=app, client=(peer, 40000))
            return httpx.AsyncClient(transport=transport, base_url=f"{scheme}://{HOST}", **options)

        await check(engine, new.key, client)


def _cookie(answer: httpx.Response, name: str) -> str:
    """A cookie the answer sets, as the browser (on https, before the proxy) sends it back:
    the test's client speaks plain http to the app, and its jar keeps no Secure cookie."""
    found = re.search(rf"{name}=([^;]+)", answer.headers.get("set-cookie", ""))
    assert found is not None, answer.headers
    return f"{name}={found.group(1)}"


async def _sign_in(http: httpx.AsyncClient, headers: dict[str, str], **form: str) -> httpx.Response:
    page = await http.get("/sign-in", headers=headers)
    token = CSRF.search(page.text)
    assert token is not None
    sent = {**headers, "Cookie": _cookie(page, "waypost_signin")}
    return await http.post("/sign-in", data={"csrf": token.group(1), **form}, headers=sent)


FORWARDED_HTTPS = {"X-Forwarded-Proto": "https", "X-Forwarded-For": "203.0.113.9"}


# == a TLS-terminating proxy ===============================================================
def test_behind_a_trusted_tls_proxy_cookies_are_secure_posts_pass_and_hsts_is_sent(
    db_url: str,
) -> None:
    async def check(engine: AsyncEngine, key: str, client: Any) -> None:
        async with client() as http:
            headers = {**FORWARDED_HTTPS, "Origin": f"https://{HOST}"}
            signed = await _sign_in(http, headers, key=key)
            assert signed.status_code == 303, signed.text
            cookie = signed.headers["set-cookie"].lower()
            assert "waypost_session=" in cookie and "secure" in cookie
            assert signed.headers["strict-transport-security"] == "max-age=31536000"
            # A console POST from the page the browser shows (https://HOST) is accepted.
            session = {**FORWARDED_HTTPS, "Cookie": _cookie(signed, "waypost_session")}
            page = await http.get("/runs", headers=session)
            assert page.status_code == 200
            assert "strict-transport-security" in page.headers
            token = CSRF.search(page.text)
            assert token is not None
            posted = {**session, "Origin": f"https://{HOST}"}
            out = await http.post("/sign-out", data={"csrf": token.group(1)}, headers=posted)
            assert out.status_code == 303
            assert (await http.get("/runs", headers=session)).status_code == 303  # signed out

    asyncio.run(_site(db_url, check, trusted=["10.0.0.0/8"]))


def test_without_a_trusted_proxy_forwarded_headers_are_not_believed(db_url: str) -> None:
    async def check(engine: AsyncEngine, key: str, client: Any) -> None:
        async with client() as http:
            # What a TLS proxy sends: the server cannot tell it from anyone, so it is plain http.
            headers = {**FORWARDED_HTTPS, "Origin": f"https://{HOST}"}
            refused = await _sign_in(http, headers, key=key)
            assert refused.status_code == 403  # https://... is not this (http) origin
            signed = await _sign_in(http, {"X-Forwarded-Proto": "https"}, key=key)
            assert signed.status_code == 303
            assert "secure" not in signed.headers["set-cookie"].lower()
            assert "strict-transport-security" not in signed.headers

    asyncio.run(_site(db_url, check))


def test_forwarded_headers_from_a_peer_outside_the_trusted_networks_are_ignored(
    db_url: str,
) -> None:
    async def check(engine: AsyncEngine, key: str, client: Any) -> None:
        async with client(peer="198.51.100.7") as http:
            headers = {**FORWARDED_HTTPS, "Origin": f"https://{HOST}"}
            assert (await _sign_in(http, headers, key=key)).status_code == 403
            answer = await http.get("/healthz", headers=FORWARDED_HTTPS)
            assert "strict-transport-security" not in answer.headers

    asyncio.run(_site(db_url, check, trusted=["10.0.0.0/8"]))


# == the client's address =================================================================
def _refusal_addresses(caplog: pytest.LogCaptureFixture) -> list[str]:
    found = []
    for record in caplog.records:
        said = re.search(r"sign-in refused: .* from (\S+)$", record.getMessage())
        if said:
            found.append(said.group(1))
    return found


def test_the_client_address_is_the_right_most_untrusted_forwarded_one(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="waypost.console.access")

    async def check(engine: AsyncEngine, key: str, client: Any) -> None:
        wrong = {"tenant": "acme", "user": "rita", "password": "not the password"}
        chains = [
            "203.0.113.9",  # one proxy
            "192.0.2.1, 203.0.113.10",  # a client's own (forged) entry, then the real one
            "203.0.113.11, 10.0.0.7",  # through a second trusted proxy
            "garbage, 203.0.113.12",
        ]
        async with client() as http:
            for chain in chains:
                answer = await _sign_in(http, {"X-Forwarded-For": chain}, **wrong)
                assert answer.status_code == 401
            await _sign_in(http, {}, **wrong)  # no header: the proxy itself
        async with client(peer="198.51.100.7") as http:
            await _sign_in(http, {"X-Forwarded-For": "203.0.113.99"}, **wrong)

    asyncio.run(_site(db_url, check, trusted=["10.0.0.0/8"]))
    assert _refusal_addresses(caplog) == [
        "203.0.113.9",
        "203.0.113.10",
        "203.0.113.11",
        "203.0.113.12",
        PROXY,
        "198.51.100.7",  # not a trusted proxy: its header is not believed
    ]


def test_trusted_proxies_are_addresses_or_networks() -> None:
    proxies = TrustedProxies.parse(["10.0.0.0/8, 192.168.1.1", "::1,fd00::/8"])
    assert proxies.texts() == ["10.0.0.0/8", "192.168.1.1/32", "::1/128", "fd00::/8"]
    assert proxies.trusts("10.1.2.3") and proxies.trusts("::ffff:10.1.2.3")
    assert not proxies.trusts("11.0.0.1") and not proxies.trusts("not an address")
    for bad in ("10.0.0.0/33", "proxy.example", "10.0.0.0/8;rm", "1.2.3"):
        with pytest.raises(ValueError, match="a trusted proxy is an address or a network"):
            TrustedProxies.parse([bad])
    assert TrustedProxies.parse([]).networks == ()


# == headers of every answer ===============================================================
def test_every_answer_says_nosniff_and_no_store(db_url: str) -> None:
    async def check(engine: AsyncEngine, key: str, client: Any) -> None:
        async with client(headers={"Authorization": f"Bearer {key}"}) as http:
            answers = [
                await http.get("/v1/runs"),
                await http.get("/v1/runs/nope"),  # 404
                await http.post(
                    "/v1/runs", content=b"{", headers={"Content-Type": "application/json"}
                ),
                await http.get("/healthz"),
                await http.get("/openapi.json"),
                await http.get("/no/such/route"),
            ]
            for answer in answers:
                assert answer.headers["x-content-type-options"] == "nosniff", answer.url
                assert answer.headers["cache-control"] == "no-store", answer.url
                assert "strict-transport-security" not in answer.headers  # plain http
            css = await http.get("/static/waypost.css")
            assert css.headers["cache-control"] == "max-age=3600"  # the route's own
            assert css.headers["x-content-type-options"] == "nosniff"

    asyncio.run(_site(db_url, check))


def test_over_https_every_answer_carries_hsts(db_url: str) -> None:
    async def check(engine: AsyncEngine, key: str, client: Any) -> None:
        async with client(scheme="https") as http:
            for path in ("/healthz", "/sign-in", "/v1/runs"):
                answer = await http.get(path)
                assert answer.headers["strict-transport-security"] == "max-age=31536000", path

    asyncio.run(_site(db_url, check))
