"""Secrets in the headers of `http` steps: named in the definition, resolved at call time.

The definition, its stored versions and the run's history hold only the secret's
name; the value goes out in the request and nowhere else, even when the receiver
echoes it back.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import waypost as wp
from tests.helpers import db_query
from tests.helpers.http_server import Answer, LocalServer, Received, serving
from tests.helpers.http_steps import push_definition, secret_engine

pytestmark = pytest.mark.timeout(120)

CRM_TOKEN = "crm-tok-6f1d0a9b3c7e4d2a8f5b0c1e9d7a3b6f"
SECRETS = {("acme", "crm_token"): CRM_TOKEN, ("acme", "short"): "s3cr"}


def lookup(tenant: str, name: str) -> str | None:
    return SECRETS.get((tenant, name))


class EchoServer(LocalServer):
    """Echoes the request's Authorization header: with a 503 on /flaky the first time."""

    def __init__(self) -> None:
        self.authorizations: list[str] = []
        super().__init__(self._echo)

    def _echo(self, request: Received) -> Answer:
        auth = request.headers.get("authorization", "")
        self.authorizations.append(auth)
        flaky = request.path == "/flaky" and len(self.authorizations) == 1
        body = json.dumps({"you_sent": auth, "echo": {auth: [auth]}}).encode()
        return Answer(503 if flaky else 200, body, {"Content-Type": "application/json"})


@pytest.fixture
def echo() -> Iterator[EchoServer]:
    yield from serving(EchoServer())


def definition(url: str, authorization: Any) -> str:
    headers = {"Authorization": authorization, "X-Plain": "visible"}
    return push_definition(url, headers, {"max_attempts": 2, "initial_interval": 0})


@pytest.fixture
def engine(sqlite_url: str, echo: EchoServer) -> Iterator[wp.Engine]:
    with secret_engine(sqlite_url, lookup) as eng:
        yield eng


def test_a_header_names_a_secret_that_goes_out_but_is_never_stored(
    engine: wp.Engine, echo: EchoServer, sqlite_url: str
) -> None:
    secret_header = {"secret": "crm_token", "format": "Bearer {}"}
    engine.publish(definition(f"{echo.base}/flaky", secret_header), tenant="acme")
    run = engine.start("crm_sync", {"id": 7}, tenant="acme")
    answer = run.result(timeout=30)["answer"]
    assert echo.authorizations == [f"Bearer {CRM_TOKEN}"] * 2  # a 503, then a 200

    # What the receiver echoed is kept without the secret, in the result and in the
    # error of the first attempt.
    assert answer == {
        "you_sent": "Bearer [redacted]",
        "echo": {"Bearer [redacted]": ["Bearer [redacted]"]},
    }
    history = json.dumps([e.data for e in engine.history(run.run_id, tenant="acme")])
    assert "answered 503" in history and "Bearer [redacted]" in history
    assert '"secret": "crm_token"' in history  # the request names the secret
    stored = db_query(sqlite_url, "SELECT body, source FROM definitions")
    files = [p.read_bytes().decode("latin-1") for p in Path(sqlite_url[10:]).parent.iterdir()]
    for text in (history, json.dumps(stored), *files):
        assert CRM_TOKEN not in text
        assert CRM_TOKEN[:12] not in text and CRM_TOKEN[-12:] not in text


def test_a_short_secret_and_the_default_format(engine: wp.Engine, echo: EchoServer) -> None:
    engine.publish(definition(f"{echo.base}/ok", {"secret": "short"}), tenant="acme")
    answer = engine.start("crm_sync", {"id": 1}, tenant="acme").result(timeout=30)["answer"]
    assert echo.authorizations == ["s3cr"]
    assert answer["you_sent"] == "[redacted]"


def test_a_secret_is_looked_up_in_the_runs_tenant_only(engine: wp.Engine, echo: EchoServer) -> None:
    engine.publish(definition(f"{echo.base}/ok", {"secret": "crm_token"}), tenant="globex")
    run = engine.start("crm_sync", {"id": 1}, tenant="globex")
    with pytest.raises(wp.WorkflowFailed, match="secret 'crm_token' of tenant 'globex' is not set"):
        run.result(timeout=30)
    assert echo.authorizations == []


@pytest.mark.parametrize(
    ("authorization", "problem"),
    [
        ({"secret": "crm_token", "format": "Bearer"}, "one {}"),
        ({"secret": "crm_token", "format": "{} and {}"}, "one {}"),
        ({"secret": "crm_token", "format": "Bearer {0}"}, "one {}"),
        ({"secret": "crm token"}, "one {}"),
        ({"secret": "crm_token", "extra": 1}, "one {}"),
        ({"format": "Bearer {}"}, "one {}"),
        (7, "one {}"),
    ],
)
def test_a_malformed_secret_reference_is_refused_at_publishing(
    engine: wp.Engine, authorization: Any, problem: str
) -> None:
    with pytest.raises(wp.DefinitionError) as caught:
        engine.publish(definition("https://crm.example.com/x", authorization), tenant="acme")
    assert "steps.push.http.headers.Authorization" in str(caught.value)
    assert problem in str(caught.value)
