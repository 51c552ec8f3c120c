"""Payload encryption's and the record's integrity calls of `AsyncEngine` (a mixin over
the one door)."""

from __future__ import annotations

from waypost.model import operations as ops

from .door import LocalDoor


class EncryptionCalls:
    """Re-encryption of stored payloads and sealing of legacy runs, as the embedded API's
    local principal."""

    _local: LocalDoor  # the engine's door, as its local principal in a tenant

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
        return await self._local(request, tenant)

    async def seal_legacy(
        self,
        run_id: str | None = None,
        *,
        after: str | None = None,
        limit: int = 100,
        dry_run: bool = False,
        tenant: str = "default",
    ) -> ops.SealLegacyReport:
        """Bind runs written before histories and rows were bound to their run. Admin,
        on an engine given the chain key.

        Each run's history is hashed again from its run's genesis under the current
        chain key, and its row and its approvals' rows that carry no check get one, in
        one transaction per run; a run whose history or rows do not verify even as legacy
        ones is left as it is and named in the report's `refused`. With `run_id`, that
        run; without, up to `limit` of the tenant's runs whose ids sort after `after`:
        call again with the report's `next_after` until it is None. `dry_run` counts what
        would change and writes nothing.
        """
        request = ops.SealLegacy(run_id=run_id, after=after, limit=limit, dry_run=dry_run)
        return await self._local(request, tenant)
