"""Payload encryption's operation: moving stored payloads to the current key.

`ReEncrypt` re-encrypts one run, or the next batch of the tenant's runs in run id
order, under the engine's current encryption key (payloads stored as plaintext
before encryption was turned on are encrypted too). The plaintext, and so the
hash chain, does not change (decision 0009). Re-exported by
`waypost.model.operations`.
"""

from __future__ import annotations

from dataclasses import dataclass

from waypost.model.identity import Role
from waypost.model.requests import REMOTE_LATER, Cli, Http, RunBatch

MAX_REENCRYPT_BATCH = 1_000  # runs per request (each in its own transaction)


@dataclass(frozen=True)
class ReEncryptReport:
    """What one `ReEncrypt` did (or, with `dry_run`, would do).

    `runs`: runs looked at; `values`: encrypted or plaintext payloads found in them;
    `resealed`: those (re-)encrypted under `key` (with `dry_run`: that would be);
    `next_after`: the run id to continue after, None when no run is left;
    `schedules`: schedule inputs found, and `schedules_resealed` those (re-)encrypted
    (the first batch of a walk, without `run_id` or `after`, does the tenant's
    schedules; other requests leave them alone and say 0); `webhook_sources` and
    `webhook_secrets_resealed` the same for the secrets of the tenant's webhook sources.
    """

    tenant: str
    key: str
    dry_run: bool
    runs: int
    values: int
    resealed: int
    next_after: str | None
    schedules: int = 0
    schedules_resealed: int = 0
    webhook_sources: int = 0
    webhook_secrets_resealed: int = 0


@dataclass(frozen=True)
class ReEncrypt(RunBatch[ReEncryptReport]):
    """Re-encrypt stored payloads under the current encryption key (`ReEncryptReport`).

    With `run_id`: that run (`RunNotFound` if the tenant has none). Without: up to
    `limit` of the tenant's runs whose ids sort after `after` (None: from the first,
    and the inputs of the tenant's schedules too); call again with the report's
    `next_after` until it is None. `dry_run` counts and
    writes nothing. Needs the engine to have encryption keys (`ConfigurationError`).
    """

    roles = frozenset({Role.ADMIN})
    name = "re-encrypt"
    call = "reencrypt"
    remote = REMOTE_LATER
    http = Http("POST", "/v1/encryption/re-encrypt")
    cli = Cli("runs re-encrypt")
    most = MAX_REENCRYPT_BATCH
