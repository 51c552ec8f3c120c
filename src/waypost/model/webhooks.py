"""Webhooks by correlation: their operations, and reading what a webhook sends.

A webhook source belongs to one tenant, under an id of the tenant's own. Its sender
(a payment provider, a shipping partner) knows no run id: it POSTs JSON to
`/v1/webhooks/{url_id}` (the source's random URL id), signed with the source's
secret, and the value at the source's `correlate_path` in that JSON is the
correlation value. The source's `signal` goes, with the body as payload, to every
run of the tenant waiting for it with `correlate=(correlate_key, value)`.

The operations are declared here, beside `operations.py` and in the same form
(`Request` fields with their door checks), so that the catalogue there stays
within its size; `WEBHOOK_OPERATIONS` lists them as `OPERATIONS` lists the others.

Outside input is bounded before anything is computed on it: source ids (they are
URL path segments), dotted paths, tolerances, the headers and the body's size,
its nesting (checked by a linear scan before parsing, so no parser recursion),
its encoding and the text in it.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from waypost.errors import InvalidRequest, WebhookRefused
from waypost.model.definitions.format import MAX_NESTING, too_deep_at, unstorable_problem
from waypost.model.identity import Principal, check_id, preview
from waypost.model.numbers import whole_number
from waypost.model.operations import Check, Request, checked
from waypost.model.requests import REMOTE_LATER, Http, NotOffered, Resource

T = TypeVar("T")

MAX_WEBHOOK_BODY = 4 * 1024 * 1024  # bytes; the server's --max-body refuses larger first
MAX_HEADER = 4096  # characters of each webhook header read
MAX_PATH_SEGMENTS = 32
MAX_TOLERANCE = 3600  # seconds
DEFAULT_TOLERANCE = 300
SIGNATURE_REFUSED = "the webhook's signature does not verify (or its source is unknown)"
# The headers a delivery is read from (Standard Webhooks), in lower case.
WEBHOOK_HEADERS = ("webhook-id", "webhook-timestamp", "webhook-signature")

_SOURCE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_SEGMENT = re.compile(r"[A-Za-z0-9_-]{1,100}")


def check_source(value: Any) -> str:
    """A source id: 1-64 letters, digits, `.`, `_`, `-` (a URL path segment as it is)."""
    if not isinstance(value, str) or not _SOURCE.fullmatch(value):
        raise InvalidRequest(
            f"a webhook source id is 1 to 64 letters, digits, '.', '_' or '-' "
            f"(starting with a letter or digit), not {preview(value)}",
            field="source",
        )
    return value


def parse_path(value: Any) -> tuple[str, ...]:
    """A dotted path into a JSON body (`data.order.id`, `items.0.sku`): its segments."""
    segments = value.split(".") if isinstance(value, str) else []
    if (
        not segments
        or len(segments) > MAX_PATH_SEGMENTS
        or not all(_SEGMENT.fullmatch(s) for s in segments)
    ):
        raise InvalidRequest(
            f"correlate_path must be a dotted path of at most {MAX_PATH_SEGMENTS} names "
            f"(letters, digits, '_', '-'; a number indexes a list), not {preview(value)}",
            field="correlate_path",
        )
    return tuple(segments)


def check_tolerance(value: Any) -> int:
    return whole_number(value, "tolerance_seconds", 1, MAX_TOLERANCE)


def nested_deeper_than(text: str, limit: int) -> bool:
    """Whether JSON text nests objects and arrays more than `limit` deep (a linear scan)."""
    return too_deep_at(text, limit) is not None


def read_body(body: bytes) -> Any:
    """The JSON value of a webhook's body; `InvalidRequest` (field "body") if it is none."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidRequest(
            f"the webhook's body is not UTF-8 text (byte {exc.start})", field="body"
        ) from None
    if nested_deeper_than(text, MAX_NESTING):
        raise InvalidRequest(
            f"the webhook's body nests more than {MAX_NESTING} levels deep", field="body"
        )
    try:
        value = json.loads(text, parse_float=_finite, parse_constant=_no_constant)
    except ValueError as exc:
        what = exc.msg if isinstance(exc, json.JSONDecodeError) else "a number out of range"
        raise InvalidRequest(f"the webhook's body is not JSON: {what}", field="body") from None
    problem = unstorable_problem(value)
    if problem is not None:
        where = f" at {problem.path}" if problem.path else ""
        raise InvalidRequest(f"the webhook's body{where} {problem.message}", field="body")
    return value


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(text)  # 1e999 would be infinity, which JSON cannot hold
    return value


def _no_constant(text: str) -> Any:
    raise ValueError(text)  # NaN, Infinity: not JSON


def correlation_value(body: Any, path: tuple[str, ...]) -> str:
    """The text at `path` in a webhook's JSON body: a string, or a whole number as text."""
    where = ".".join(path)
    value = body
    for segment in path:
        if isinstance(value, Mapping) and segment in value:
            value = value[segment]
        elif isinstance(value, list) and segment.isdigit() and int(segment) < len(value):
            value = value[int(segment)]
        else:
            raise InvalidRequest(
                f"the webhook's body has no correlation value at {where!r}", field="body"
            )
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        raise InvalidRequest(
            f"the webhook's correlation value at {where!r} must be a string or a whole "
            f"number, not {preview(value)}",
            field="body",
        )
    return check_id(value, f"the webhook's correlation value at {where!r}")


# == the operations ====================================================================
WEBHOOK_SOURCES = Resource("webhook source", "/v1/webhook-sources", key="source", group="webhooks")


@dataclass(frozen=True)
class WebhookSourceRequest(Request[T]):
    """A request about the webhook sources of the caller's tenant (admin only: no role
    listed), served over HTTP only for now."""

    resource = WEBHOOK_SOURCES
    remote = REMOTE_LATER


@dataclass(frozen=True)
class CreateWebhookSource(WebhookSourceRequest[Any], verb="create"):
    """Register a webhook source in the caller's tenant (`NewWebhookSource`, with its secret:
    shown this once). Admin only. Its deliveries signal `signal` to the runs waiting with
    `correlate=(correlate_key, <the body's value at correlate_path>)`."""

    source: str = checked(Check.ID, what="source")
    signal: str = checked(Check.ID, what="signal name")
    correlate_key: str = checked(Check.ID, what="correlate_key")
    correlate_path: str = checked(Check.ID, what="correlate_path")
    tolerance_seconds: int = DEFAULT_TOLERANCE

    def checked(self, principal: Principal) -> Request[Any]:
        check_source(self.source)
        parse_path(self.correlate_path)
        check_tolerance(self.tolerance_seconds)
        return super().checked(principal)


@dataclass(frozen=True)
class ListWebhookSources(WebhookSourceRequest[Any], verb="list"):
    """The webhook sources of the caller's tenant (`list[WebhookSourceInfo]`: no secret)."""

    call = "webhook_sources"


@dataclass(frozen=True)
class DeleteWebhookSource(WebhookSourceRequest[None], verb="delete"):
    """Delete a webhook source of the caller's tenant: its deliveries are refused at once."""

    source: str = checked(Check.ID, what="source")


@dataclass(frozen=True)
class DeliverWebhook(Request[Any]):
    """A webhook delivery to `POST /v1/webhooks/{url_id}` (`WebhookDelivered`); `source`
    is the URL id the sender used (a source made before URL ids existed: its id).

    Open to anyone, the unauthenticated principal included: the signature made with
    the source's secret over its id, timestamp and body authenticates it. `headers`
    are the request's (only the Standard Webhooks ones are read), `body` its raw bytes.
    """

    open_to_anonymous = True
    name = "deliver webhook"
    call = "deliver_webhook"
    remote = NotOffered("a webhook is sent, signed, by its sender")
    http = Http("POST", "/v1/webhooks/{source:id}", tag="webhooks")
    cli = NotOffered("a webhook is sent, signed, by its sender")
    source: str
    headers: Mapping[str, str] = field(repr=False)
    body: bytes = field(repr=False)

    def checked(self, principal: Principal) -> Request[Any]:
        if not isinstance(self.source, str) or not _SOURCE.fullmatch(self.source):
            raise WebhookRefused(SIGNATURE_REFUSED)  # as for any unknown source
        if not isinstance(self.headers, Mapping):
            raise InvalidRequest("a webhook's headers are a mapping", field="headers")
        if not isinstance(self.body, bytes | bytearray):
            raise InvalidRequest("a webhook's body is its raw bytes", field="body")
        if len(self.body) > MAX_WEBHOOK_BODY:
            raise InvalidRequest(
                f"the webhook's body is over {MAX_WEBHOOK_BODY} bytes", field="body"
            )
        wanted: dict[str, str] = {}
        for name, value in self.headers.items():
            lowered = name.lower() if isinstance(name, str) else ""
            if lowered in WEBHOOK_HEADERS:
                if not isinstance(value, str) or len(value) > MAX_HEADER:
                    raise WebhookRefused(f"the {lowered} header is not one a webhook sends")
                wanted[lowered] = value
        return DeliverWebhook(self.source, wanted, bytes(self.body))


WEBHOOK_OPERATIONS: tuple[type[Request[Any]], ...] = (
    CreateWebhookSource,
    ListWebhookSources,
    DeleteWebhookSource,
    DeliverWebhook,
)
"""The webhook operations the door serves (a test checks each has a handler and an engine
method, as for `operations.OPERATIONS`)."""
