"""No credential of a notification reaches a log or the database, whatever the receiver says.

The approve and reject tokens, and the links that carry them, exist only in the
notification itself. A receiver that fails and echoes what it was sent, or a sender
whose errors quote it, must not copy them into the warning log or the outbox.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest

import waypost as wp
from tests.helpers import db_query, eventually
from tests.helpers.http_server import Answer, LocalServer, Received, serving
from waypost.features.senders import Notification, WebhookSender

pytestmark = pytest.mark.timeout(120)


@wp.workflow(name="needs_ann")
async def needs_ann(ctx: wp.WorkflowContext) -> str:
    decision = await ctx.approval("sign", approvers=wp.AnyOf(users=["ann"]))
    return decision.outcome


class EchoReceiver(LocalServer):
    """A webhook receiver that answers 500 and echoes the request body, as some do."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        super().__init__(self._echo)
        self.url = f"{self.base}/hooks/approvals"

    def _echo(self, request: Received) -> Answer:
        self.bodies.append(request.body)
        answer = b'{"error": "cannot process", "request": ' + request.body + b"}"
        return Answer(500, answer, {"Content-Type": "application/json"})


@pytest.fixture
def echo() -> Iterator[EchoReceiver]:
    yield from serving(EchoReceiver())


def assert_holds_none(text: str, note: dict[str, Any]) -> None:
    for link in (note["approve_url"], note["reject_url"]):
        assert link not in text
    for token in (note["approve_token"], note["reject_token"]):
        # Nor a piece of one: an error message cut short may end inside a token.
        for i in range(len(token) - 12):
            assert token[i : i + 12] not in text, (token[i : i + 12], text)


def stored_errors(engine: wp.Engine) -> list[str]:
    rows = db_query(
        engine.url,
        "SELECT last_error FROM outbox WHERE kind = ? AND last_error IS NOT NULL",
        ("approval.notify",),
    )
    return [row[0] for row in rows]


def test_a_receiver_echoing_the_request_leaks_no_credential_into_the_log_or_the_outbox(
    make_engine: Any, echo: EchoReceiver, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="waypost")
    engine = make_engine(needs_ann, notifier=WebhookSender(echo.url, "whsec-0123", timeout=5))
    with engine.running():
        engine.start(needs_ann)
        errors = eventually(lambda: stored_errors(engine), "the failed delivery stored")
        note = json.loads(echo.bodies[0])
    assert "500" in errors[0]
    assert "answered 500" in caplog.text
    for text in (*errors, caplog.text):
        assert_holds_none(text, note)


class QuotingSender:
    """A sender whose library quotes what it sent in its errors, truncated mid-token."""

    def send(self, notification: Notification) -> None:
        raise RuntimeError(
            f"POST {notification.approve_url} failed; payload "
            f"{json.dumps(notification.to_json())[:180]}...; retry with "
            f"{notification.reject_token[:20]}"
        )


def test_a_senders_error_is_stored_and_logged_without_the_credentials_it_quotes(
    make_engine: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="waypost")
    seen: list[Notification] = []

    class Recording(QuotingSender):
        def send(self, notification: Notification) -> None:
            seen.append(notification)
            super().send(notification)

    engine = make_engine(needs_ann, notifier=Recording())
    with engine.running():
        engine.start(needs_ann)
        errors = eventually(lambda: stored_errors(engine), "the failed delivery stored")
    assert errors[0].startswith("RuntimeError: POST ")
    assert "[redacted]" in errors[0]
    assert "RuntimeError" in caplog.text
    for text in (*errors, caplog.text):
        assert_holds_none(text, seen[0].to_json())
