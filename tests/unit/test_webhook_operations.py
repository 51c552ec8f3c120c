"""The webhook operations: wired like every other operation, and reading what a sender sends."""

from __future__ import annotations

from pathlib import Path

import pytest

import waypost as wp
from tests.helpers.doors import door_serving
from waypost.errors import InvalidRequest, WebhookRefused
from waypost.model import operations as ops, webhooks as wh
from waypost.model.identity import Principal


def test_every_webhook_operation_has_a_handler_and_only_delivery_is_open(tmp_path: Path) -> None:
    door = door_serving(wh, wh.WEBHOOK_OPERATIONS, tmp_path)
    assert [op for op in wh.WEBHOOK_OPERATIONS if op.open_to_anonymous] == [wh.DeliverWebhook]
    assert ops.SignalWithStart in ops.OPERATIONS and door.serves(ops.SignalWithStart)


@pytest.mark.parametrize(
    "request_",
    [
        wh.CreateWebhookSource("s", "paid", "order", "id"),
        wh.ListWebhookSources(),
        wh.DeleteWebhookSource("s"),
        ops.SignalWithStart("w", None, "r", "go"),
    ],
)
def test_the_anonymous_principal_may_send_none_of_the_others(
    tmp_path: Path, request_: ops.Request[object]
) -> None:
    with (
        wp.Engine(f"sqlite:///{tmp_path / 'w.db'}") as engine,
        pytest.raises(wp.PermissionDenied),
    ):
        engine.execute(request_, Principal.anonymous())


def test_a_delivery_is_bounded_before_anything_reads_it() -> None:
    anyone = Principal.anonymous()
    with pytest.raises(WebhookRefused):
        wh.DeliverWebhook("a/b", {}, b"{}").checked(anyone)
    with pytest.raises(InvalidRequest):
        wh.DeliverWebhook("s", {}, b"x" * (wh.MAX_WEBHOOK_BODY + 1)).checked(anyone)
    with pytest.raises(WebhookRefused):
        wh.DeliverWebhook("s", {"Webhook-Id": "x" * 5000}, b"{}").checked(anyone)
    kept = wh.DeliverWebhook("s", {"Webhook-Id": "a", "Cookie": "c", "X": "y"}, b"{}")
    assert kept.checked(anyone) == wh.DeliverWebhook("s", {"webhook-id": "a"}, b"{}")
    assert "x" * 10 not in repr(wh.DeliverWebhook("s", {"webhook-signature": "x" * 10}, b""))


def test_the_correlation_value_is_read_from_a_dotted_path() -> None:
    body = wh.read_body(b'{"data": {"items": [{"sku": "A-1"}, {"sku": 7}]}, "n": true}')
    assert wh.correlation_value(body, wh.parse_path("data.items.0.sku")) == "A-1"
    assert wh.correlation_value(body, wh.parse_path("data.items.1.sku")) == "7"
    for path in ("data.items.2.sku", "data.missing", "n", "data", "data.items.x"):
        with pytest.raises(InvalidRequest):
            wh.correlation_value(body, wh.parse_path(path))
    for bad in ("", "a..b", ".a", "a.", "a.$b", "a b", ".".join("a" * 33), 7):
        with pytest.raises(InvalidRequest):
            wh.parse_path(bad)


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"{",
        b"\xff",
        b"[" * 65 + b"]" * 65,
        b'{"a": "\\u0000"}',
        b'{"a": "\\ud800"}',
        b'{"a": 1e999999}',
    ],
)
def test_bodies_that_are_not_storable_json_are_refused(raw: bytes) -> None:
    with pytest.raises(InvalidRequest) as caught:
        wh.read_body(raw)
    assert caught.value.field == "body"


def test_nesting_is_counted_outside_strings() -> None:
    assert wh.read_body(b'{"a": "' + b"[" * 1000 + b'"}') == {"a": "[" * 1000}
    assert wh.read_body(b"[" * 64 + b"]" * 64) is not None
