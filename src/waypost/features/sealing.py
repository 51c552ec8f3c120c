"""Sealing legacy runs (decision 0030): the command that binds runs written before
histories and rows were bound to their run.

The work is the store's (`Store.seal_legacy_run`, one transaction per run); this room
walks the tenant's runs for `SealLegacy`, a batch per request, as re-encryption does.
"""

from __future__ import annotations

from waypost.engine.ports import Machinery
from waypost.errors import ConfigurationError
from waypost.model import operations as ops
from waypost.model.identity import Principal
from waypost.model.logs import logger
from waypost.model.requests import handles

from .run_batches import RunBatch

log = logger("waypost.sealing")


class Sealing:
    """Binds the tenant's legacy runs to their run ids under the engine's chain key."""

    def __init__(self, machinery: Machinery):
        self.machinery = machinery

    @handles(ops.SealLegacy)
    async def seal_legacy(self, req: ops.SealLegacy, principal: Principal) -> ops.SealLegacyReport:
        m = self.machinery
        if not m.settings.chain.keyed:
            raise ConfigurationError(
                "sealing legacy runs needs the chain key (WAYPOST_CHAIN_KEYS): without one, "
                "anyone who can write the database could seal their own edits"
            )
        store = m.store
        tenant = principal.tenant
        batch = await RunBatch.of(store, tenant, req.run_id, req.after, req.limit)
        runs = rehashed = rows = 0
        refused: dict[str, str] = {}
        async for run_id, done in batch.each(
            lambda run_id: store.seal_legacy_run(tenant, run_id, req.dry_run)
        ):
            runs += 1
            if done.refused is not None:
                refused[run_id] = done.refused
                log.warning("run %s/%s not sealed: %s", tenant, run_id, done.refused)
                continue
            rehashed += int(done.rehashed)
            rows += done.rows
            if done.rehashed and not req.dry_run:
                m.forget(tenant, run_id)  # an engine's copy holds the old hashes
        if (rehashed or rows) and not req.dry_run:
            log.info(
                "sealed %d histories and %d rows of %d runs of tenant %s",
                rehashed,
                rows,
                runs,
                tenant,
            )
        return ops.SealLegacyReport(
            tenant=tenant,
            dry_run=req.dry_run,
            runs=runs,
            rehashed=rehashed,
            rows=rows,
            next_after=batch.next_after,
            refused=refused,
        )
