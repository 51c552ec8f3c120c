"""The outbox dispatcher: notifications of approvals, delivered at least once.

A commit that asks for an approval puts a message in the outbox (same
transaction). The dispatcher (one per engine, claiming messages with a lease)
works out who is asked (groups are resolved through the directory then), makes
each approver's credentials — only their hashes are stored — and hands the
notification to the sender after commit, outside any transaction, retrying
with backoff until it is delivered or given up. Notification ids are stable;
each attempt carries new credentials and retires the approver's earlier ones
(only hashes are stored, so a pair cannot be sent twice), so a receiver that
sees an id twice keeps the later copy. The plaintext credentials exist only in
memory and in the delivered notification.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping

from waypost.engine.ports import Machinery
from waypost.errors import ConfigurationError, StoreError
from waypost.model import approvals as ap
from waypost.model.logs import logger
from waypost.store.base import NewCredential, OutboxItem
from waypost.store.reach import warn_unless_away

from .approvals import Approvals
from .outbound import scrub
from .room import Room
from .senders import DeliveryError, LogSender, Notification, Sender

log = logger("waypost.approvals")

_MAX_SEND_ATTEMPTS = 12


def approval_links(base_url: str, tokens: Mapping[str, str]) -> dict[str, str]:
    """The link of each action's token: `{base_url}/approve/{token}`.

    `base_url` is the server's (the engine's `approval_url`). A link opens the
    server's approval page, which shows what the token decides and decides only
    when the approver confirms (a POST). The token carries its credential id, so
    neither the tenant nor the approval is in the URL; its characters are URL-safe.
    """
    base = base_url.rstrip("/")
    return {action: f"{base}/approve/{token}" for action, token in tokens.items()}


class Outbox(Room):
    """Delivers the outbox's messages through the engine's sender."""

    def __init__(
        self,
        machinery: Machinery,
        approvals: Approvals,
        notifier: Sender | None,
        base_url: str,
    ) -> None:
        super().__init__(machinery)
        self.approvals = approvals
        self.notifier: Sender = notifier or LogSender()
        self.base_url = base_url
        self._wake = asyncio.Event()

    def wake(self) -> None:
        """A message may wait: deliver now rather than at the next poll."""
        self._wake.set()

    async def dispatch_forever(self) -> None:
        """Deliver outbox messages: claimed with a lease, so any engine may send them."""
        settings = self.machinery.settings
        while True:
            self._wake.clear()
            try:
                # A message whose sender outlives the lease may be sent twice; its
                # stable id lets the receiver drop the copy.
                items = await self.store.claim_outbox(
                    settings.owner, settings.clock(), 32, 2 * settings.lease
                )
            except StoreError as exc:
                warn_unless_away(
                    log, self.store, "claiming notifications failed (will retry): %s", exc
                )
                items = []
            for item in items:
                await self._deliver(item)
            if not items:
                with contextlib.suppress(TimeoutError):
                    # not wait_for: see Scheduler._sleep
                    async with asyncio.timeout(settings.poll_interval):
                        await self._wake.wait()

    async def _deliver(self, item: OutboxItem) -> None:
        settings = self.machinery.settings
        try:
            if item.kind == "approval.requested":
                await self._fan_out(item)
            elif item.kind == "approval.notify":
                await self._notify(item)
            else:
                raise ConfigurationError(f"unknown outbox message kind {item.kind!r}")
        except StoreError as exc:
            log.warning("notification %s put off by a database error: %s", item.id, exc)
            return  # its lease lapses and it is tried again
        except Exception as exc:
            retry = item.attempts < _MAX_SEND_ATTEMPTS
            delay = min(300.0, 2.0**item.attempts)
            log.log(
                logging.WARNING if retry else logging.ERROR,
                "sending notification %s failed (attempt %d%s): %s",
                item.id,
                item.attempts,
                f", retry in {delay:.0f}s" if retry else ", giving up",
                exc,
            )
            with contextlib.suppress(StoreError):
                now = settings.clock()
                await self.store.finish_outbox(
                    item.id, settings.owner, now, _error_text(exc), now + delay if retry else None
                )
            return
        with contextlib.suppress(StoreError):
            await self.store.finish_outbox(item.id, settings.owner, settings.clock(), None, None)

    async def _fan_out(self, item: OutboxItem) -> None:
        """One approval asked for: one message per approver, resolved now."""
        approval = await self.store.get_approval(item.tenant, item.payload["approval_id"])
        if approval is None or approval.status != ap.PENDING:
            return
        approvers = await self.approvals.eligible(approval)
        if not approvers:
            log.warning(
                "approval %s (%s) of run %s has nobody to ask: the policy names no one who "
                "may decide (check its groups)",
                approval.approval_id,
                approval.name,
                approval.run_id,
            )
        await self.store.add_outbox(
            [
                OutboxItem(
                    id=f"{approval.approval_id}:notify:{who}",
                    tenant=approval.tenant,
                    kind="approval.notify",
                    payload={"approval_id": approval.approval_id, "approver": who},
                    attempts=0,
                )
                for who in approvers
            ],
            self.machinery.settings.clock(),
        )
        self._wake.set()

    async def _notify(self, item: OutboxItem) -> None:
        tenant = item.tenant
        approver = str(item.payload["approver"])
        approval = await self.store.get_approval(tenant, item.payload["approval_id"])
        if approval is None or approval.status != ap.PENDING:
            return
        if await self.approvals.refusal(approval, approver, []) is not None:
            return  # removed meanwhile: nothing to send
        tokens: dict[str, str] = {}
        creds = []
        for action in ap.ACTIONS:
            issued = ap.issue_credential()
            tokens[action] = issued.token
            creds.append(NewCredential(issued.credential_id, action, issued.secret_hash))
        now = self.machinery.settings.clock()
        # Only hashes are stored, so a retry cannot send the same pair again: issuing
        # retires the approver's earlier pair on this approval (the newest copy works).
        current = await self.store.issue_credentials(
            tenant, approval.approval_id, approver, creds, now
        )
        if current is None:
            return
        links = approval_links(self.base_url, tokens)
        notification = Notification(
            id=item.id,
            kind="approval.requested",
            tenant=tenant,
            approval_id=approval.approval_id,
            run_id=approval.run_id,
            step=approval.step,
            name=approval.name,
            approver=approver,
            expires_at=approval.expires_at,
            approve_token=tokens[ap.APPROVE],
            reject_token=tokens[ap.REJECT],
            approve_url=links[ap.APPROVE],
            reject_url=links[ap.REJECT],
            data=approval.data,
        )
        await self._send(notification)

    async def _send(self, notification: Notification) -> None:
        """Hand a notification to the sender; what it raises comes back without credentials.

        Senders' errors are logged and stored, and may quote what they sent (a
        receiver that echoes the request in its error page, a library that names
        the URL it posted to): every credential, and every piece of one, is cut out.
        """
        try:
            await asyncio.to_thread(self.notifier.send, notification)
        except Exception as exc:
            # The links carry the tokens as they are (URL-safe characters): cutting the
            # tokens out cuts them out of the links too.
            tokens = (notification.approve_token, notification.reject_token)
            raise DeliveryError(scrub(_error_text(exc), tokens)) from None


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if not isinstance(exc, DeliveryError) else str(exc)
