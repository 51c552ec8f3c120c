"""Payload encryption's call of `AsyncEngine` (a mixin over the one door)."""

from __future__ import annotations

from typing import TypeVar

from waypost.model import operations as ops

T = TypeVar("T")


class EncryptionCalls:
    """Re-encryption of stored payloads, as the embedded API's local principal."""

    async def _local(self, request: ops.Request[T], tenant: str) -> T:
        raise NotImplementedError

    async def reencrypt(
        self,
        run_id: str | None = None,
        *,
        after: str | None = None,
        limit: int = 100,
        dry_run: bool = False,
        tenant: str = "default",
    ) -> ops.ReEncryptReport:
        """Re-encrypt stored payloads under the current encryption key. Admin.

        With `run_id`, that run; without, up to `limit` of the tenant's runs whose ids
        sort after `after`: call again with the report's `next_after` until it is None.
        Values already under the current key are left alone; plaintext stored before
        encryption was turned on is encrypted. The history's hashes do not change.
        `dry_run` counts what would change and writes nothing.
        """
        request = ops.ReEncrypt(run_id=run_id, after=after, limit=limit, dry_run=dry_run)
        report: ops.ReEncryptReport = await self._local(request, tenant)
        return report
