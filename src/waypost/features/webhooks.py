"""Webhooks by correlation: sources, and deliveries that find the runs waiting for them.

A tenant's admin registers a source (`CreateWebhookSource`) under an id of the
tenant's own choosing: another tenant's ids are neither seen nor taken. Its
deliveries go to `POST /v1/webhooks/{url_id}`, where `url_id` is drawn here (128
random bits, unique across tenants; decision 0031): the URL names no tenant, and
the source it names is how the tenant is learnt. Its secret (Standard Webhooks'
`whsec_...`) is made here, shown once, and kept in the database sealed like a
payload when the store has encryption keys (checking an HMAC needs the secret
itself, so it cannot be a hash): whoever reads the database without the keys
cannot sign deliveries for its sources.

A delivery (`DeliverWebhook`, open to the unauthenticated principal: the signature
authenticates it) is checked in this order, and each refusal writes nothing:

1. the three Standard Webhooks headers are there and well formed;
2. the signature (`v1`, over id, timestamp and body) matches the source's secret.
   An unknown URL id costs the same HMAC against a key nobody has, and answers the
   same `WebhookRefused`, so neither the existence of a source nor its tenant shows;
3. the timestamp is within the source's tolerance of the engine's clock;
4. the body is JSON (UTF-8, nested at most 64 levels, text a store can hold), within
   the tenant's `max_payload_bytes`, with a correlation value at the source's path;
5. the store delivers (`Store.deliver_correlated`): a delivery id seen before
   answers its first outcome and delivers nothing; otherwise every run of the
   tenant waiting for the source's signal with (key, value) gets it, the body as
   its payload, or, if none waits, `NoRunWaiting` (404) and the id is not kept, so
   the sender's retry can deliver once a run waits.
"""

from __future__ import annotations

import dataclasses
import secrets

from waypost.engine.ports import Machinery
from waypost.engine.quotas import refused_append
from waypost.errors import (
    InvalidRequest,
    NoRunWaiting,
    PayloadTampered,
    StoreContention,
    WebhookRefused,
    WebhookSourceExists,
    WebhookSourceNotFound,
)
from waypost.model.events import SignalReceived
from waypost.model.identity import Principal, check_id, preview
from waypost.model.logs import logger
from waypost.model.records import NewWebhookSource, WebhookDelivered, WebhookSourceInfo
from waypost.model.requests import handles
from waypost.model.webhooks import (
    SIGNATURE_REFUSED,
    CreateWebhookSource,
    DeleteWebhookSource,
    DeliverWebhook,
    ListWebhookSources,
    correlation_value,
    parse_path,
    read_body,
)
from waypost.store.base import (
    CommitResult,
    CorrelatedDelivery,
    Limits,
    RunCommit,
    WebhookSourceRecord,
)

from .definitions import Definitions
from .signing import new_standard_secret, standard_key, standard_signature_matches
from .stored import answer_of

audit = logger("waypost.audit")

URL_ID_PREFIX = "wh_"
_URL_ID_ROUNDS = 8
# Runs one delivery signals at most (the oldest waits first); others stay waiting.
MAX_CORRELATED_RUNS = 1000
# Delivery ids are kept this long past twice the tolerance (a timestamp may be up to the
# tolerance ahead of the clock, and the id is refused by its timestamp after that).
KEEP_MARGIN = 60.0


def _info(record: WebhookSourceRecord) -> WebhookSourceInfo:
    return answer_of(WebhookSourceInfo, record)


class Webhooks:
    """Webhook sources and deliveries of one engine."""

    def __init__(self, machinery: Machinery, definitions: Definitions) -> None:
        self.machinery = machinery
        self.definitions = definitions
        self._unknown_key = secrets.token_bytes(32)  # what an unknown source is checked with

    # == sources ===============================================================
    @handles(CreateWebhookSource)
    async def create_source(
        self, req: CreateWebhookSource, principal: Principal
    ) -> NewWebhookSource:
        m = self.machinery
        secret = new_standard_secret()
        for _ in range(_URL_ID_ROUNDS):
            record = WebhookSourceRecord(
                source=req.source,
                tenant=principal.tenant,
                signal=req.signal,
                correlate_key=req.correlate_key,
                correlate_path=req.correlate_path,
                tolerance_seconds=req.tolerance_seconds,
                secret=secret,
                created_at=m.settings.clock(),
                created_by=principal.subject,
                url_id=URL_ID_PREFIX + secrets.token_hex(16),
            )
            try:
                created = await m.store.create_webhook_source(record, m.settings.quotas)
            except StoreContention:  # pragma: no cover - 128-bit ids do not collide
                continue
            if not created:
                raise WebhookSourceExists(
                    f"tenant {preview(principal.tenant)} has a webhook source "
                    f"{preview(req.source)} already; choose another id"
                )
            info = _info(record)
            return NewWebhookSource(**vars(info), secret=secret)
        raise StoreContention(  # pragma: no cover
            "no unused webhook URL id was drawn; nothing was written: try again"
        )

    @handles(ListWebhookSources)
    async def list_sources(
        self, req: ListWebhookSources, principal: Principal
    ) -> list[WebhookSourceInfo]:
        return [_info(r) for r in await self.machinery.store.list_webhook_sources(principal.tenant)]

    @handles(DeleteWebhookSource)
    async def delete_source(self, req: DeleteWebhookSource, principal: Principal) -> None:
        if not await self.machinery.store.delete_webhook_source(principal.tenant, req.source):
            raise WebhookSourceNotFound(
                f"no webhook source {preview(req.source)} in tenant {preview(principal.tenant)}"
            )

    # == deliveries ============================================================
    @handles(DeliverWebhook)
    async def deliver(self, req: DeliverWebhook, principal: Principal) -> WebhookDelivered:
        m = self.machinery
        delivery_id, timestamp, offered = self._headers(req)
        try:
            source = await m.store.webhook_source(req.source)  # the URL names its url_id
        except PayloadTampered:  # a sealed secret edited or moved: it verifies nothing
            audit.warning(
                "webhook to %s refused: its source's stored secret is damaged", req.source
            )
            source = None
        key = self._unknown_key
        if source is not None:
            try:
                key = standard_key(source.secret)
            except ValueError:
                source = None  # a damaged secret verifies nothing
        if not standard_signature_matches(key, delivery_id, timestamp, req.body, offered):
            source = None
        if source is None:
            audit.info("webhook to %s refused: signature or source unknown", req.source)
            raise WebhookRefused(SIGNATURE_REFUSED)
        now = m.settings.clock()
        tolerance = source.tolerance_seconds
        if abs(now - timestamp) > tolerance:
            raise WebhookRefused(
                f"the webhook's timestamp is {now - timestamp:.0f} s from now; its source "
                f"accepts at most {tolerance} s either way"
            )
        body = read_body(req.body)
        value = correlation_value(body, parse_path(source.correlate_path))
        tenant = source.tenant
        await self.definitions.bounded(tenant, "webhook's body", body)
        signal = SignalReceived(
            name=source.signal,
            payload=body,
            webhook={"source": source.source, "delivery_id": delivery_id},
        )
        limits = self.definitions.limits_for(tenant)
        quotas = await m.quotas.get(tenant)
        wake = m.waking(
            RunCommit(
                tenant=tenant,
                run_id="",
                events=(),
                now=now,
                require_active=True,
                limits=Limits.of_signal(quotas, limits.max_pending_signals),
            )
        )
        result = await m.store.deliver_correlated(
            CorrelatedDelivery(
                tenant=tenant,
                source=source.source,
                delivery_id=delivery_id,
                signal=source.signal,
                key=source.correlate_key,
                value=value,
                event=signal.at(now),
                wake=wake,
                now=now,
                keep_since=now - 2 * tolerance - KEEP_MARGIN,
                max_runs=MAX_CORRELATED_RUNS,
            )
        )
        if result.duplicate:
            runs = (result.outcome or {}).get("runs", [])
            return WebhookDelivered(source.source, delivery_id, tuple(runs), duplicate=True)
        refused = refused_append(
            CommitResult(result.conflict),
            dataclasses.replace(wake, run_id=result.run_id),
            "deliver the webhook (nothing was delivered)",
        )
        if result.conflict is not None and refused is not None:
            raise refused
        if not result.delivered:
            raise NoRunWaiting(
                f"no run waits for signal {preview(source.signal)} with "
                f"{preview(source.correlate_key)} = {preview(value)}; nothing was delivered"
            )
        for run_id, res in result.delivered:
            m.woken(tenant, run_id, res)
        runs = [run_id for run_id, _ in result.delivered]
        return WebhookDelivered(source.source, delivery_id, tuple(runs))

    @staticmethod
    def _headers(req: DeliverWebhook) -> tuple[str, int, str]:
        """The delivery id, timestamp and offered signatures; `WebhookRefused` if absent."""
        delivery_id = req.headers.get("webhook-id")
        raw_timestamp = req.headers.get("webhook-timestamp")
        offered = req.headers.get("webhook-signature")
        if delivery_id is None or raw_timestamp is None or offered is None:
            raise WebhookRefused(
                "a webhook needs the headers webhook-id, webhook-timestamp and webhook-signature"
            )
        try:
            check_id(delivery_id, "webhook-id")
        except InvalidRequest:
            raise WebhookRefused(
                "the webhook-id header must be 1 to 200 characters without control characters"
            ) from None
        raw_timestamp = raw_timestamp.strip()
        if not (raw_timestamp.isascii() and raw_timestamp.isdigit() and len(raw_timestamp) < 16):
            raise WebhookRefused("the webhook-timestamp header is not unix seconds")
        return delivery_id, int(raw_timestamp), offered
