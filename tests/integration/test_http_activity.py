"""The built-in "waypost.http" activity against a real local HTTP server and a real engine."""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import re
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, strategies as st

import waypost as wp
from tests.helpers.http_server import Answer, Server
from tests.helpers.http_steps import http_attempt
from waypost.features.http import (
    HTTP_ACTIVITY,
    HttpStepError,
    HttpStepRetryable,
    env_secrets,
    make_http_activity,
    secret_env_name,
)
from waypost.features.senders import WebhookSignatureError, verify_webhook
from waypost.model.events import canonical_json
from waypost.runtime.context import ActivityContext

pytestmark = pytest.mark.timeout(120)

SECRETS: dict[tuple[str, str], str | bytes] = {
    ("default", "hook-key"): "s3cret-value",
    ("acme", "hook-key"): b"acme-bytes",
}


def lookup(tenant: str, name: str) -> str | bytes | None:
    return SECRETS.get((tenant, name))


@pytest.fixture
def server() -> Iterator[Server]:
    srv = Server()
    yield srv
    srv.close()


@wp.workflow(name="call_http")
async def call_http(ctx: wp.WorkflowContext, requests: list[dict[str, Any]]) -> list[Any]:
    return [await ctx.run(HTTP_ACTIVITY, request) for request in requests]


@pytest.fixture
def engine(sqlite_url: str, server: Server) -> Iterator[wp.Engine]:
    eng = wp.Engine(sqlite_url, lease=2.0, poll_interval=0.05, shutdown_grace=5.0)
    eng.register(call_http, make_http_activity(allow=[f"127.0.0.1:{server.port}"], secrets=lookup))
    with eng.running():
        yield eng
    eng.close()


def run(engine: wp.Engine, *requests: dict[str, Any], tenant: str = "default") -> Any:
    return engine.start(call_http, list(requests), tenant=tenant).result(timeout=30)


def fails(engine: wp.Engine, *requests: dict[str, Any]) -> str:
    with pytest.raises(wp.WorkflowFailed) as caught:
        run(engine, *requests)
    return str(caught.value)


def test_a_json_body_goes_out_canonical_and_a_json_answer_comes_back_parsed(
    engine: wp.Engine, server: Server
) -> None:
    server.answer(
        "/orders",
        Answer(201, b'{"id": 7, "ok": true}', {"Content-Type": "application/json; charset=utf-8"}),
    )
    server.answer("/status", Answer(200, "fine \u2713".encode(), {"Content-Type": "text/plain"}))
    server.answer("/empty", Answer(204))
    body = {"z": [1, 2.5, None], "a": {"y": "\u00e9", "b": True}}
    results = run(
        engine,
        {"url": f"{server.base}/orders?x=1", "method": "POST", "body": body},
        {"url": f"{server.base}/status", "headers": {"Accept": "text/plain"}},
        {"url": f"{server.base}/empty", "method": "DELETE"},
    )
    assert results == [{"id": 7, "ok": True}, "fine \u2713", None]
    post, get, delete = server.requests()
    assert (post.method, post.path) == ("POST", "/orders?x=1")
    assert post.body == canonical_json(body).encode()
    assert post.body == b'{"a":{"b":true,"y":"\xc3\xa9"},"z":[1,2.5,null]}'
    assert post.headers["content-type"] == "application/json"
    assert post.headers["user-agent"] == "waypost"
    assert (get.method, get.body, get.headers["accept"]) == ("GET", b"", "text/plain")
    assert "content-type" not in get.headers
    assert delete.method == "DELETE"
    keys = [r.headers["idempotency-key"] for r in (post, get, delete)]
    assert all(keys) and len(set(keys)) == 3  # one key per step


def test_a_step_may_set_its_own_content_type(engine: wp.Engine, server: Server) -> None:
    server.answer("/in", Answer(200))
    run(
        engine,
        {
            "url": f"{server.base}/in",
            "method": "PUT",
            "headers": {"content-type": "application/vnd.acme+json"},
            "body": [1],
        },
    )
    (put,) = server.requests("/in")
    assert put.headers["content-type"] == "application/vnd.acme+json"
    assert put.body == b"[1]"


def test_a_503_is_retried_with_the_same_idempotency_key(engine: wp.Engine, server: Server) -> None:
    server.answer(
        "/hooks/tok-123",
        Answer(503, b"busy, try later"),
        Answer(200, b'{"done": 1}', {"Content-Type": "application/problem+json"}),
    )
    handle = engine.start(
        call_http, [{"url": f"{server.base}/hooks/tok-123", "method": "POST", "body": {"n": 1}}]
    )
    assert handle.result(timeout=30) == [{"done": 1}]
    first, second = server.requests("/hooks/tok-123")
    assert first.headers["idempotency-key"] == second.headers["idempotency-key"]
    assert first.body == second.body == b'{"n":1}'
    (failed,) = [e for e in engine.history(handle.run_id) if e.type == "ActivityFailed"]
    error = failed.data["error"]
    assert error["type"] == "HttpStepRetryable"
    assert f"POST {server.base} answered 503" in error["message"]
    assert "busy, try later" in error["message"]
    assert "tok-123" not in error["message"]  # paths may hold secrets


def test_the_signature_verifies_and_may_go_under_another_header(
    engine: wp.Engine, server: Server
) -> None:
    server.answer("/signed", Answer(200))
    url = f"{server.base}/signed?v=1"
    run(
        engine,
        {"url": url, "method": "POST", "body": {"amount": 5}, "signature": {"secret": "hook-key"}},
        {"url": url, "method": "PUT", "body": {"amount": 6},
         "signature": {"secret": "hook-key", "header": "X-Acme-Signature"}},
    )  # fmt: skip
    plain, custom = server.requests("/signed")
    verify_webhook("s3cret-value", plain.body, plain.headers, url=url)
    assert plain.headers["webhook-id"] == plain.headers["idempotency-key"]
    with pytest.raises(WebhookSignatureError):
        verify_webhook("another-secret", plain.body, plain.headers, url=url)
    with pytest.raises(WebhookSignatureError):
        verify_webhook("s3cret-value", b'{"amount":7}', plain.headers, url=url)
    with pytest.raises(WebhookSignatureError):  # signed for another endpoint
        verify_webhook("s3cret-value", plain.body, plain.headers, url=f"{server.base}/other")
    assert "webhook-signature" not in custom.headers
    verify_webhook(
        "s3cret-value",
        custom.body,
        custom.headers,
        url=url,
        method="PUT",
        signature_header="X-Acme-Signature",
    )
    with pytest.raises(WebhookSignatureError):  # signed as a PUT
        verify_webhook(
            "s3cret-value", custom.body, custom.headers, url=url,
            signature_header="X-Acme-Signature",
        )  # fmt: skip
    assert abs(int(custom.headers["webhook-timestamp"]) - time.time()) < 60


def test_the_secret_is_the_runs_tenants(engine: wp.Engine, server: Server) -> None:
    server.answer("/signed", Answer(200))
    request = {"url": f"{server.base}/signed", "signature": {"secret": "hook-key"}}
    run(engine, request, tenant="acme")
    (got,) = server.requests("/signed")
    assert got.body == b""
    verify_webhook(b"acme-bytes", got.body, got.headers, url=request["url"], method="GET")


def test_a_missing_secret_fails_at_once_naming_it(engine: wp.Engine, server: Server) -> None:
    server.answer("/signed", Answer(200))
    message = fails(
        engine, {"url": f"{server.base}/signed", "signature": {"secret": "no-such-key"}}
    )
    assert "HttpStepError" in message and "after 1 attempt:" in message
    assert "'no-such-key'" in message and "not set" in message
    assert server.requests() == []


def test_a_400_fails_at_once_without_retry(engine: wp.Engine, server: Server) -> None:
    server.answer("/bad", Answer(400, b'{"error": "amount is missing"}'))
    message = fails(engine, {"url": f"{server.base}/bad", "method": "POST", "body": {}})
    assert "after 1 attempt:" in message and "HttpStepError" in message
    assert f"POST {server.base} answered 400" in message
    assert "amount is missing" in message
    assert len(server.requests("/bad")) == 1


def test_a_redirect_is_not_followed(engine: wp.Engine, server: Server) -> None:
    server.answer("/old", Answer(302, b"", {"Location": "/new"}))
    server.answer("/new", Answer(200, b"moved here"))
    message = fails(engine, {"url": f"{server.base}/old", "method": "POST", "body": {"a": 1}})
    assert "after 1 attempt:" in message
    assert "redirects are not followed" in message
    assert [r.path for r in server.requests()] == ["/old"]


def test_a_host_not_allowed_is_refused_before_any_request(
    engine: wp.Engine, server: Server
) -> None:
    server.answer("/x", Answer(200))
    message = fails(engine, {"url": f"http://localhost:{server.port}/x"})
    assert "after 1 attempt:" in message
    assert "localhost" in message and "http_allow" in message and "--http-allow" in message
    assert server.requests() == []


def test_the_step_may_not_set_the_idempotency_key_or_the_signature_headers(
    engine: wp.Engine, server: Server
) -> None:
    server.answer("/x", Answer(200))
    url = f"{server.base}/x"
    message = fails(engine, {"url": url, "headers": {"idempotency-key": "mine"}})
    assert "idempotency-key" in message and "after 1 attempt:" in message
    signed = {"secret": "hook-key", "header": "X-Sig"}
    message = fails(engine, {"url": url, "headers": {"X-SIG": "forged"}, "signature": signed})
    assert "X-SIG" in message
    message = fails(
        engine, {"url": url, "headers": {"Webhook-Timestamp": "1"}, "signature": signed}
    )
    assert "Webhook-Timestamp" in message
    assert server.requests() == []


def invoke(call: Any, ctx: ActivityContext, request: dict[str, Any]) -> Any:
    """Call the activity directly, outside an engine."""
    result = call(ctx, request)
    return asyncio.run(result) if inspect.iscoroutine(result) else result


@pytest.fixture
def fake_dns(monkeypatch: pytest.MonkeyPatch) -> None:
    """example.com and its subdomains resolve to this machine, where the server listens."""
    real = socket.getaddrinfo

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(host, str) and (host.lower() + ".").endswith("example.com."):
            host = "127.0.0.1"
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


# example.com names resolve to 127.0.0.1 here (fake_dns): "127.0.0.1" lets them connect.
@pytest.mark.parametrize(
    ("allow", "url", "admitted"),
    [
        (None, "http://127.0.0.1:{port}/", False),
        ([], "http://127.0.0.1:{port}/", False),
        (["*", "127.0.0.1"], "http://example.com:{port}/", True),
        (["*"], "http://example.com:{port}/", False),  # a loopback address, not named
        (["*"], "http://127.0.0.1:{port}/", False),
        (["127.0.0.1"], "http://127.0.0.1:{port}/", True),
        (["127.0.0.0/8"], "http://127.0.0.1:{port}/", True),
        (["127.0.0.1:{port}"], "http://127.0.0.1:{port}/", True),
        (["127.0.0.1:1"], "http://127.0.0.1:{port}/", False),
        (["10.0.0.0/8"], "http://127.0.0.1:{port}/", False),
        (["example.com:{port}", "127.0.0.1"], "http://EXAMPLE.com:{port}/", True),
        (["Example.COM", "127.0.0.0/8"], "http://example.com:{port}/", True),
        (["example.com", "127.0.0.1:1"], "http://example.com:{port}/", False),
        (["example.com", "127.0.0.1"], "http://api.example.com:{port}/", False),
        (["*.example.com", "127.0.0.1"], "http://api.example.com:{port}/", True),
        (["*.example.com", "127.0.0.1"], "http://a.b.example.com:{port}/", True),
        (["*.example.com", "127.0.0.1"], "http://example.com:{port}/", False),
        (
            ["*.example.com", "127.0.0.1"],
            "http://api.example.com.evil.example.org:{port}/",
            False,
        ),
        (["*.example.com:1", "127.0.0.1"], "http://api.example.com:{port}/", False),
        (["127.0.0.1"], "ftp://127.0.0.1:{port}/", False),
        (["127.0.0.1"], "http://127.0.0.1@example.com:{port}/", False),
    ],
)
def test_the_allow_list(
    server: Server, fake_dns: None, allow: list[str] | None, url: str, admitted: bool
) -> None:
    server.answer("/", Answer(200, b"hi"))
    entries = None if allow is None else [a.format(port=server.port) for a in allow]
    call = make_http_activity(allow=entries, secrets=lookup)
    request = {"url": url.format(port=server.port)}
    if admitted:
        assert invoke(call, http_attempt(), request) == "hi"
        (got,) = server.requests()
        assert got.headers["host"].lower() == request["url"].split("/")[2].lower()
    else:
        with pytest.raises(HttpStepError):
            invoke(call, http_attempt(), request)
        assert server.requests() == []


def test_a_malformed_allow_list_entry_is_a_configuration_error() -> None:
    for entry in ("http://example.com", "a*.example.com", "example.com:x", "10.0.0.0/33"):
        with pytest.raises(wp.ConfigurationError):
            make_http_activity(allow=[entry])


def test_an_oversized_answer_fails(server: Server) -> None:
    server.answer("/big", Answer(200, b"x" * 101))
    server.answer("/fits", Answer(200, b"x" * 100))
    call = make_http_activity(allow=["127.0.0.1"], max_response_bytes=100)
    assert invoke(call, http_attempt(), {"url": f"{server.base}/fits"}) == "x" * 100
    with pytest.raises(HttpStepError, match="more than 100 bytes"):
        invoke(call, http_attempt(), {"url": f"{server.base}/big"})


def test_408_429_and_connection_errors_are_retryable(server: Server) -> None:
    server.answer("/slow", Answer(408))
    server.answer("/many", Answer(429, json.dumps({"retry": "later"}).encode()))
    call = make_http_activity(allow=["127.0.0.1"])
    for path in ("/slow", "/many"):
        with pytest.raises(HttpStepRetryable) as caught:
            invoke(call, http_attempt(), {"url": f"{server.base}{path}"})
        assert caught.value.status in (408, 429)
    with socket.socket() as unused:  # a port nobody listens on
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    with pytest.raises(HttpStepRetryable, match=f"GET http://127.0.0.1:{port} failed"):
        invoke(call, http_attempt(), {"url": f"http://127.0.0.1:{port}/gone"})


def test_a_tenant_cannot_borrow_another_tenants_secret(
    monkeypatch: pytest.MonkeyPatch, server: Server
) -> None:
    # acme's key, under its own name and under the names an older scheme read.
    monkeypatch.setenv(secret_env_name("acme", "hook-key"), "acme-key")
    monkeypatch.setenv("WAYPOST_SECRET_ACME__HOOK_KEY", "acme-key")
    monkeypatch.setenv("WAYPOST_SECRET_HOOK_KEY", "acme-key")
    for name in ("acme__hook-key", "ACME__HOOK_KEY", "acme__hook_key", "hook-key", "HOOK_KEY"):
        assert env_secrets("evil", name) is None, name
    # Tenants whose names differ only in punctuation or case are different tenants.
    for tenant in ("acme.", "acme-", "ACME", "Acme", "acme_", "acme__hook"):
        assert env_secrets(tenant, "hook-key") is None, tenant
    assert env_secrets("acme", "hook-key") == "acme-key"

    server.answer("/signed", Answer(200))
    call = make_http_activity(allow=["127.0.0.1"])
    with pytest.raises(HttpStepError, match="not set"):
        invoke(
            call, http_attempt("evil"),
            {"url": f"{server.base}/signed", "signature": {"secret": "acme__hook-key"}},
        )  # fmt: skip
    assert server.requests() == []


@given(
    st.tuples(st.text(max_size=8), st.text(max_size=8)),
    st.tuples(st.text(max_size=8), st.text(max_size=8)),
)
def test_the_environment_name_of_a_secret_is_unambiguous(
    one: tuple[str, str], other: tuple[str, str]
) -> None:
    for tenant, name in (one, other):
        assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", secret_env_name(tenant, name))
    assert (secret_env_name(*one) == secret_env_name(*other)) == (one == other)


def test_the_environment_names_keep_letters_and_digits_and_escape_the_rest() -> None:
    assert secret_env_name("acme", "crm") == "WAYPOST_TENANT_SECRET_acme__crm"
    assert secret_env_name("Acme-Co", "crm_token.v2") == (
        "WAYPOST_TENANT_SECRET_Acme_2DCo__crm_5Ftoken_2Ev2"
    )
    assert secret_env_name("caf\u00e9", "k") == "WAYPOST_TENANT_SECRET_caf_C3_A9__k"


def test_a_missing_secrets_message_is_the_same_whatever_else_the_environment_holds(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The message goes into the tenant's history: it names the variable to set, and
    never tells whether an older-form variable (or any other) exists."""
    server.answer("/x", Answer(200))
    call = make_http_activity(allow=["127.0.0.1"])

    def message() -> str:
        with pytest.raises(HttpStepError) as caught:
            invoke(
                call,
                http_attempt("acme-co"),
                {"url": f"{server.base}/x", "signature": {"secret": "k.1"}},
            )
        return str(caught.value)

    for var in [v for v in os.environ if v.startswith("WAYPOST_SECRET_")]:
        monkeypatch.delenv(var)
    without = message()
    monkeypatch.setenv("WAYPOST_SECRET_ACME_CO__K_1", "OLD-VALUE-1")
    monkeypatch.setenv("WAYPOST_SECRET_K_1", "OLD-VALUE-2")
    monkeypatch.setenv(secret_env_name("other", "k.1"), "THEIRS")
    assert message() == without
    assert "WAYPOST_TENANT_SECRET_acme_2Dco__k_2E1" in without
    assert "WAYPOST_SECRET_ACME_CO__K_1" not in without and "OLD-VALUE" not in without
    assert server.requests() == []
