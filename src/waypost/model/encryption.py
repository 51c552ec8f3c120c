"""Encryption at rest of payloads, under keys that rotate.

The store seals each payload column as it writes it and opens it as it reads it
(`store/transactions/records.py`), so everything above the store sees plaintext
and the hash chain covers the plaintext (decision 0009). A sealed value is text:

    wpe1:<key id>:<base64url of nonce (12 bytes) + ciphertext + tag (16 bytes)>

- AES-256-GCM from the `cryptography` package, a fresh random 96-bit nonce per
  value (`os.urandom`). Under one key that is safe for about 2**32 values; rotate
  keys long before (`re-encrypt` moves old values to the current key).
- The associated data names where the value lives: the tenant, the run, and the
  event's number or the column (`Place`). A ciphertext copied to another run,
  event or column fails authentication instead of being read there.
- The key id is stored beside each ciphertext, so new values are sealed under the
  current key while every listed key still opens old ones.
- No JSON text starts with "w": a sealed value is never mistaken for plaintext.
  Once keys are set, plaintext where a sealed value belongs is refused
  (`PlaintextRefused`, naming the column and the run): someone without the keys
  could otherwise write what a reader takes for the payload. Plaintext written
  before encryption was turned on is read only in the migration mode
  (`accept_plaintext`, `WAYPOST_ENCRYPTION_ACCEPT_PLAINTEXT=1`) while
  `waypost runs re-encrypt` seals it.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
from collections.abc import Mapping
from typing import Any

from waypost.errors import (
    ConfigurationError,
    EncryptionKeyMissing,
    PayloadTampered,
    PlaintextRefused,
)

from .settings_env import key_list, secret_setting

PREFIX = "wpe1:"
KEY_BYTES = 32  # AES-256
NONCE_BYTES = 12
_KEY_ID = re.compile(r"^[A-Za-z0-9_.-]{1,32}$")

Place = tuple[str | int, ...]
"""Where a payload lives: (tenant, run id, what) — the associated data of its ciphertext."""


def event_place(tenant: str, run_id: str, seq: int) -> Place:
    return (tenant, run_id, "event", seq)


def run_place(tenant: str, run_id: str, column: str) -> Place:
    return (tenant, run_id, "run", column)


def task_place(tenant: str, run_id: str, step: str, column: str) -> Place:
    return (tenant, run_id, "task", step, column)


def approval_place(tenant: str, run_id: str, approval_id: str) -> Place:
    return (tenant, run_id, "approval", approval_id)


def _associated(place: Place) -> bytes:
    # JSON keeps the parts apart whatever characters they hold.
    return json.dumps(["waypost-payload", *place], separators=(",", ":")).encode()


def is_sealed(text: str | None) -> bool:
    return text is not None and text.startswith(PREFIX)


def sealed_key_id(text: str) -> str | None:
    """The key id a sealed value names (None for plaintext)."""
    if not text.startswith(PREFIX):
        return None
    key_id, sep, _ = text[len(PREFIX) :].partition(":")
    return key_id if sep else None


class Keys:
    """The keys payloads are encrypted with: new values under `current`, old ones
    opened by whichever listed key sealed them.

    `keys` maps key ids (1-32 letters, digits, '_', '-', '.') to 32 random bytes;
    `current` is the id new values are sealed with (by default the first);
    `accept_plaintext` reads plaintext where a sealed value belongs (the migration
    mode for data written before encryption was turned on; otherwise refused).
    """

    def __init__(
        self,
        keys: Mapping[str, bytes],
        current: str | None = None,
        *,
        accept_plaintext: bool = False,
    ) -> None:
        try:
            from cryptography.exceptions import InvalidTag
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM
        except ImportError:  # pragma: no cover - the test extra installs it
            raise ConfigurationError(
                "payload encryption needs the 'cryptography' package: pip install 'waypost[crypto]'"
            ) from None
        if not keys:
            raise ConfigurationError("payload encryption needs at least one key")
        for key_id, secret in keys.items():
            if not isinstance(key_id, str) or not _KEY_ID.match(key_id):
                raise ConfigurationError(
                    f"encryption key id {str(key_id)[:40]!r} is not allowed: use 1-32 letters, "
                    "digits, '_', '-' or '.'"
                )
            if not isinstance(secret, bytes) or len(secret) != KEY_BYTES:
                raise ConfigurationError(
                    f"encryption key {key_id!r} must be {KEY_BYTES} bytes (AES-256), generate one "
                    "with: python -c 'import base64, secrets; "
                    "print(base64.b64encode(secrets.token_bytes(32)).decode())'"
                )
        self.current = current if current is not None else next(iter(keys))
        if self.current not in keys:
            raise ConfigurationError(
                f"the current encryption key {self.current[:40]!r} is not among the keys given "
                f"({', '.join(keys)})"
            )
        self.ids = tuple(keys)
        self.accept_plaintext = accept_plaintext
        self._ciphers: dict[str, Any] = {k: AESGCM(v) for k, v in keys.items()}
        self._refused: type[Exception] = InvalidTag

    def __repr__(self) -> str:
        plain = ", accept_plaintext=True" if self.accept_plaintext else ""
        return f"Keys(ids={list(self.ids)}, current={self.current!r}{plain})"

    def seal(self, text: str, place: Place) -> str:
        """`text` encrypted under the current key, bound to `place`."""
        nonce = os.urandom(NONCE_BYTES)
        body = self._ciphers[self.current].encrypt(nonce, text.encode(), _associated(place))
        encoded = base64.urlsafe_b64encode(nonce + body).rstrip(b"=").decode()
        return f"{PREFIX}{self.current}:{encoded}"

    def open(self, text: str, place: Place) -> str:
        """The plaintext of a value `seal` made for `place`; plaintext passes unchanged
        only in the migration mode (`accept_plaintext`), else `PlaintextRefused`."""
        return open_text(self, text, place)

    def knows(self, key_id: str) -> bool:
        return key_id in self._ciphers

    def reseal(self, text: str, place: Place) -> str | None:
        """`text` sealed under the current key, or None if it is sealed under it already."""
        if sealed_key_id(text) == self.current:
            return None
        return self.seal(self.open(text, place), place)


def open_text(keys: Keys | None, text: str, place: Place) -> str:
    """The plaintext of a stored payload: itself when it was stored as plaintext and no
    keys are set (or they accept plaintext, while migrating); else `PlaintextRefused`."""
    if not text.startswith(PREFIX):
        if keys is not None and not keys.accept_plaintext:
            raise PlaintextRefused(
                f"the stored payload of {_describe(place)} is plaintext, but encryption keys "
                "are set: it was written before encryption was turned on, or by someone "
                "without the keys. To read old plaintext while `waypost runs re-encrypt` "
                "seals it, set WAYPOST_ENCRYPTION_ACCEPT_PLAINTEXT=1"
            )
        return text
    return _open(keys, text, place)


def _open(keys: Keys | None, text: str, place: Place) -> str:
    key_id = sealed_key_id(text) or ""
    if not key_id:
        raise PayloadTampered(f"the stored payload of {_describe(place)} is not a ciphertext")
    if keys is None or key_id not in keys._ciphers:
        known = ", ".join(keys.ids) if keys is not None else "none"
        raise EncryptionKeyMissing(
            f"a stored payload is encrypted with key {key_id[:32]!r}, which this process was "
            f"not given (it has: {known}); set it in WAYPOST_ENCRYPTION_KEYS or Keys(...)",
            key_id=key_id[:32],
        )
    cipher = keys._ciphers[key_id]
    encoded = text[len(PREFIX) + len(key_id) + 1 :]
    try:
        raw = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
        plain = cipher.decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], _associated(place))
        return str(plain.decode())
    except (binascii.Error, ValueError, keys._refused):
        raise PayloadTampered(
            f"the stored payload of {_describe(place)} (key {key_id!r}) fails authentication: "
            "it was damaged, edited, or copied from another run, event or column"
        ) from None


def _describe(place: Place) -> str:
    """The column and the run (or schedule) a place names, for messages."""
    tenant, owner, kind, *rest = (*place, "", "")[: max(len(place), 3)]
    rest = [*rest, "", ""]
    run = f"run {str(owner)[:80]!r} (tenant {str(tenant)[:80]!r})"
    if kind == "run":
        return f"runs.{rest[0]} of {run}"
    if kind == "event":
        return f"events.data of event {rest[0]} of {run}"
    if kind == "task":
        return f"tasks.{rest[1]} of step {str(rest[0])[:80]!r} of {run}"
    if kind == "approval":
        return f"approvals.data of approval {str(rest[0])[:80]!r} of {run}"
    if kind == "schedule":
        return f"schedules.input of schedule {str(owner)[:80]!r} (tenant {str(tenant)[:80]!r})"
    return f"{kind} of {run}"


def keys_from_environment(env: Mapping[str, str]) -> Keys | None:
    """`WAYPOST_ENCRYPTION_KEYS` (`id:base64,...`, the first is current), or the file
    `WAYPOST_ENCRYPTION_KEYS_FILE` names; None when neither is set.
    `WAYPOST_ENCRYPTION_ACCEPT_PLAINTEXT=1` is the migration mode (`accept_plaintext`)."""
    accept = env.get("WAYPOST_ENCRYPTION_ACCEPT_PLAINTEXT", "").strip().lower()
    return parse_keys(
        secret_setting(env, "WAYPOST_ENCRYPTION_KEYS"),
        accept_plaintext=accept in ("1", "true", "yes"),
    )


def parse_keys(spec: str, *, accept_plaintext: bool = False) -> Keys | None:
    """Keys from `id:base64[,id:base64...]` (standard or URL-safe base64; the first is
    current); None for an empty text."""
    keys: dict[str, bytes] = {}
    for key_id, encoded in key_list(spec, "an encryption key is written id:base64"):
        if key_id in keys:
            raise ConfigurationError(f"encryption key id {key_id[:32]!r} is listed twice")
        encoded = encoded.strip().replace("-", "+").replace("_", "/")
        try:
            keys[key_id] = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
        except (binascii.Error, ValueError):
            raise ConfigurationError(
                f"encryption key {key_id[:32]!r}: the secret is not base64"
            ) from None
    return Keys(keys, accept_plaintext=accept_plaintext) if keys else None
