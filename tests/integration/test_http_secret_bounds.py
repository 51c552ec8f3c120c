"""A secret of an `http` step goes only to the hosts it names, and comes back into the
record in no form: a receiver that echoes it encoded, re-cased, spaced or in part has
the echo scrubbed before the answer is stored (both stores)."""

from __future__ import annotations

import base64
import json
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest

import waypost as wp
from tests.helpers import db_query
from tests.helpers.http_server import Answer, LocalServer, Received, serving
from tests.helpers.http_steps import push_definition, secret_engine
from waypost.features.http import Secret, env_secrets, secret_env_name

pytestmark = pytest.mark.timeout(120)

TOKEN = "crm-tok-6f1d0a9b3c7e4d2a8f5b0c1e9d7a3b6f"
SECRETS: dict[tuple[str, str], Any] = {
    ("acme", "crm_token"): TOKEN,
    ("acme", "bound_elsewhere"): Secret(TOKEN, hosts=("crm.example.com", "*.crm.example.com")),
    ("acme", "bound_here"): Secret(TOKEN, hosts=("127.0.0.1",)),
}


def lookup(tenant: str, name: str) -> Any:
    return SECRETS.get((tenant, name))


class Echoes(LocalServer):
    """Answers with the Authorization it got, in the forms a careless receiver uses."""

    def __init__(self) -> None:
        self.received: list[str] = []
        super().__init__(self._echo)

    def _echo(self, request: Received) -> Answer:
        auth = request.headers.get("authorization", "")
        self.received.append(auth)
        token = auth.removeprefix("Bearer ")
        raw = token.encode()
        body = json.dumps(
            {
                "base64": base64.b64encode(raw).decode(),
                "base64url": base64.urlsafe_b64encode(raw).decode().rstrip("="),
                "hex": raw.hex().upper(),
                "url": urllib.parse.quote(token, safe=""),
                "upper": token.upper(),
                "spaced": " ".join(token),
                "partial": f"...{token[5:21]}...",
                "basic": base64.b64encode(b"api:" + raw).decode(),
                token.upper(): "as a key",
            }
        ).encode()
        return Answer(200, body, {"Content-Type": "application/json"})


@pytest.fixture
def echoes() -> Iterator[Echoes]:
    yield from serving(Echoes())


def definition(url: str, secret: str) -> str:
    authorization = {"secret": secret, "format": "Bearer {}"}
    return push_definition(url, {"Authorization": authorization}, {"max_attempts": 1})


@pytest.fixture
def engine(db_url: str) -> Iterator[wp.Engine]:
    with secret_engine(db_url, lookup) as eng:
        yield eng


def _stored(db_url: str) -> str:
    rows = db_query(db_url, "SELECT data FROM events") + db_query(db_url, "SELECT result FROM runs")
    return json.dumps(rows)


def test_an_echo_of_the_secret_in_any_form_is_not_stored(
    engine: wp.Engine, echoes: Echoes, db_url: str
) -> None:
    engine.publish(definition(f"{echoes.base}/x", "crm_token"), tenant="acme")
    answer = engine.start("crm_sync", {"id": 7}, tenant="acme").result(timeout=30)["answer"]
    assert echoes.received == [f"Bearer {TOKEN}"]
    for field in ("base64", "base64url", "hex", "url", "upper", "spaced", "partial"):
        assert answer[field].strip("=.") == "[redacted]", (field, answer[field])
    assert answer["basic"].startswith("YXBpOm")  # "api:" and the token's first byte...
    assert "[redacted]" in answer["basic"]  # ...and then nothing of it
    assert "[redacted]" in answer
    stored = _stored(db_url)
    raw = TOKEN.encode()
    forms = [
        TOKEN,
        TOKEN.upper(),
        base64.b64encode(raw).decode(),
        raw.hex().upper(),
        urllib.parse.quote(TOKEN, safe=""),
    ]
    for form in forms:
        for i in range(len(form) - 12 + 1):
            assert form[i : i + 12] not in stored, form[i : i + 12]


def test_a_secret_bound_to_other_hosts_is_never_sent_here(
    engine: wp.Engine, echoes: Echoes, db_url: str
) -> None:
    engine.publish(definition(f"{echoes.base}/x", "bound_elsewhere"), tenant="acme")
    run = engine.start("crm_sync", {"id": 1}, tenant="acme")
    with pytest.raises(wp.WorkflowFailed) as failed:
        run.result(timeout=30)
    message = json.dumps(failed.value.error)
    assert "secret 'bound_elsewhere' of tenant 'acme' may be sent only to crm.example.com" in (
        message
    )
    assert "not to host 127.0.0.1" in message
    assert echoes.received == []  # nothing went out
    assert TOKEN not in _stored(db_url)


def test_a_secret_bound_to_the_steps_host_goes_out(engine: wp.Engine, echoes: Echoes) -> None:
    engine.publish(definition(f"{echoes.base}/x", "bound_here"), tenant="acme")
    answer = engine.start("crm_sync", {"id": 1}, tenant="acme").result(timeout=30)["answer"]
    assert echoes.received == [f"Bearer {TOKEN}"]
    assert answer["upper"] == "[redacted]"


def test_env_secrets_binds_a_secret_to_the_hosts_its_hosts_variable_lists(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    variable = secret_env_name("acme", "crm_token")
    monkeypatch.setenv(variable, TOKEN)
    assert env_secrets("acme", "crm_token") == TOKEN  # no hosts variable: not bound
    monkeypatch.setenv(variable + "__HOSTS", "crm.example.com, *.crm.example.com:443")
    found = env_secrets("acme", "crm_token")
    assert isinstance(found, Secret)
    assert found.value == TOKEN and found.hosts == ("crm.example.com", "*.crm.example.com:443")
    assert TOKEN not in repr(found)
    # Another tenant's or name's variables are never this one's hosts.
    assert env_secrets("acme", "crm_token__HOSTS") is None


def test_a_malformed_hosts_entry_is_refused_when_the_secret_is_made() -> None:
    with pytest.raises(wp.ConfigurationError):
        Secret(TOKEN, hosts=("https://crm.example.com/path",))
    with pytest.raises(wp.ConfigurationError):
        Secret(TOKEN, hosts="crm.example.com")  # type: ignore[arg-type]
