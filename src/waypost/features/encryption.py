"""Payload encryption's command: re-encrypting stored runs, schedules and webhook
sources' secrets under the current key.

Encryption itself happens in the store (`waypost.model.encryption`, decision
0009); this room only walks the tenant's runs for `ReEncrypt`, one transaction
per run, so that a rotation of a large database never holds the tables long. The
first batch of a walk also re-seals the inputs of the tenant's schedules and the
secrets of its webhook sources (one transaction each: a tenant has few, and each is
one short value).
"""

from __future__ import annotations

from waypost.engine.ports import Machinery
from waypost.errors import ConfigurationError
from waypost.model import operations as ops
from waypost.model.identity import Principal
from waypost.model.logs import logger
from waypost.model.requests import handles

from .run_batches import RunBatch

log = logger("waypost.encryption")


class Encryption:
    """Re-encrypts the stored payloads of runs and schedules under the engine's current
    key."""

    def __init__(self, machinery: Machinery):
        self.machinery = machinery
        if machinery.store.keys is not None and not machinery.settings.chain.keyed:
            # Plain SHA-256 over the plaintext lets whoever reads the database test a
            # guess of a payload against its event's hash; HMAC under a chain key does not.
            log.warning(
                "payloads are encrypted but the history's hashes are plain SHA-256 of the "
                "plaintext, which lets a reader of the database confirm a guessed payload: "
                "set a chain key too (WAYPOST_CHAIN_KEYS)"
            )

    @handles(ops.ReEncrypt)
    async def reencrypt(self, req: ops.ReEncrypt, principal: Principal) -> ops.ReEncryptReport:
        store = self.machinery.store
        keys = store.keys
        if keys is None:
            raise ConfigurationError(
                "re-encrypting needs encryption keys: set WAYPOST_ENCRYPTION_KEYS "
                "(id:base64,..., the first is current) or pass encryption=Keys(...)"
            )
        tenant = principal.tenant
        batch = await RunBatch.of(store, tenant, req.run_id, req.after, req.limit)
        runs = values = resealed = 0
        async for _, counts in batch.each(
            lambda run_id: store.reencrypt_run(tenant, run_id, req.dry_run)
        ):
            runs += 1
            values += counts.values
            resealed += counts.resealed
        schedules = None
        sources, secrets = 0, 0
        if req.run_id is None and req.after is None:  # a walk's first batch
            sources, secrets = await store.reencrypt_webhook_secrets(tenant, req.dry_run)
            if secrets and not req.dry_run:
                log.info(
                    "sealed the secrets of %d webhook sources of tenant %s under key %s",
                    secrets,
                    tenant,
                    keys.current,
                )
            schedules = await store.reencrypt_schedules(tenant, req.dry_run)
            if schedules.resealed and not req.dry_run:
                log.info(
                    "re-encrypted the inputs of %d schedules of tenant %s under key %s",
                    schedules.resealed,
                    tenant,
                    keys.current,
                )
        if resealed and not req.dry_run:
            log.info(
                "re-encrypted %d payloads of %d runs of tenant %s under key %s",
                resealed,
                runs,
                tenant,
                keys.current,
            )
        return ops.ReEncryptReport(
            tenant=tenant,
            key=keys.current,
            dry_run=req.dry_run,
            runs=runs,
            values=values,
            resealed=resealed,
            next_after=batch.next_after,
            schedules=schedules.schedules if schedules is not None else 0,
            schedules_resealed=schedules.resealed if schedules is not None else 0,
            webhook_sources=sources,
            webhook_secrets_resealed=secrets,
        )
