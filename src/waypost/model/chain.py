"""The hash chain of a history, keyed or plain.

Each event's hash covers the hash of the event before it, its own number, type,
time and data text, so changing, removing or reordering a stored event breaks
every later hash.

- **Keyed** (a chain key is configured): the hash is an HMAC-SHA256 under a
  secret the database does not hold, written `<key id>:<hex>`. Someone who can
  edit the database but does not have the key cannot make an edited history
  verify: they can neither recompute the HMACs nor fall back to plain hashes
  (a verifier with a key reports every unkeyed event). Keys rotate: new events
  are signed with the first key, every listed key still verifies.
- **Plain** (no key): the hash is SHA-256 of the same text. It finds damage and
  edits made by anyone who does not recompute the hashes afterwards; someone who
  can write the database and knows this format can rewrite a history so that it
  verifies.

The first event chains to the run's **genesis**, bound to its tenant and run id (keyed:
an HMAC of them; plain: their SHA-256), so a history copied into another run, of the
same tenant or another, does not verify there. Histories written before this binding
chain to the empty text ("legacy genesis"): accepted only where the chain says so
(`accept_legacy`: always without a key, with a key only while migrating), until a key
holder seals them (`waypost runs seal-legacy`, decision 0030).

The chain also checks the rows beside a history (`mac`, `check_mac`): a run's input,
its status, result and error, an approval's data and policy carry a MAC under the same
key over their columns, their kind and their run, checked on every read.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from waypost.errors import ConfigurationError

from .events import ChainProblem, Event, NewEvent
from .settings_env import key_list, secret_setting

_KEY_ID = re.compile(r"^[A-Za-z0-9_.-]{1,32}$")
MIN_SECRET = 16  # bytes


@dataclass(frozen=True)
class ChainKey:
    """A key for the chain: its id (stored in every hash it makes) and its secret."""

    key_id: str
    secret: bytes = field(repr=False)

    def __post_init__(self) -> None:
        if not _KEY_ID.match(self.key_id):
            raise ConfigurationError(
                f"chain key id {self.key_id[:40]!r} is not allowed: use 1-32 letters, digits, "
                "'_', '-' or '.'"
            )
        if len(self.secret) < MIN_SECRET:
            raise ConfigurationError(
                f"chain key {self.key_id!r} is too short: at least {MIN_SECRET} bytes "
                "(generate one with: python -c 'import secrets; print(secrets.token_urlsafe(32))')"
            )


def _message(prev_hash: str, seq: int, type_: str, ts: float, data_json: str) -> bytes:
    return prev_hash.encode() + f"\x1e{seq}\x1f{type_}\x1f{ts!r}\x1f".encode() + data_json.encode()


def _framed(*parts: str | None) -> bytes:
    """Texts (or None) joined so that no two lists give the same bytes: each text is
    its length in bytes, ':' and its UTF-8; None is '~'."""
    out = bytearray()
    for part in parts:
        if part is None:
            out += b"~"
        else:
            raw = part.encode("utf-8", "surrogatepass")
            out += f"{len(raw)}:".encode() + raw
    return bytes(out)


def plain_genesis(tenant: str, run_id: str) -> str:
    """What the first event of a run's history chains to, without a key."""
    return hashlib.sha256(_framed("waypost-genesis", tenant, run_id)).hexdigest()


def keyed_genesis(key: ChainKey, tenant: str, run_id: str) -> str:
    """What the first event of a run's history chains to, under `key`."""
    mac = hmac.new(key.secret, _framed("waypost-genesis", tenant, run_id), hashlib.sha256)
    return f"{key.key_id}:{mac.hexdigest()}"


def plain_mac(kind: str, parts: Sequence[str | None]) -> str:
    """The unkeyed check of a row's columns (`parts`) of `kind`."""
    return hashlib.sha256(_framed(f"waypost-row-{kind}", *parts)).hexdigest()


def keyed_mac(key: ChainKey, kind: str, parts: Sequence[str | None]) -> str:
    """`<key id>:` and the HMAC-SHA256 of a row's columns (`parts`) of `kind`."""
    mac = hmac.new(key.secret, _framed(f"waypost-row-{kind}", *parts), hashlib.sha256)
    return f"{key.key_id}:{mac.hexdigest()}"


LEGACY_GENESIS = (
    "legacy genesis: the history is not bound to this run (written before histories "
    "were; or copied here from another run): a key holder seals it with `waypost runs "
    "seal-legacy` (WAYPOST_CHAIN_ACCEPT_LEGACY=1 accepts such histories meanwhile)"
)
LEGACY_ROW = (
    "carries no check (written before rows were checked, or its check was removed): a "
    "key holder seals it with `waypost runs seal-legacy` (WAYPOST_CHAIN_ACCEPT_LEGACY=1 "
    "accepts such rows meanwhile)"
)


def plain_hash(prev_hash: str, seq: int, type_: str, ts: float, data_json: str) -> str:
    """The unkeyed hash of an event, chained to the hash of the event before it."""
    return hashlib.sha256(_message(prev_hash, seq, type_, ts, data_json)).hexdigest()


def keyed_hash(key: ChainKey, prev_hash: str, seq: int, type_: str, ts: float, text: str) -> str:
    """The keyed hash of an event: `<key id>:` and the HMAC-SHA256 of the same text."""
    mac = hmac.new(key.secret, _message(prev_hash, seq, type_, ts, text), hashlib.sha256)
    return f"{key.key_id}:{mac.hexdigest()}"


class Chain:
    """Seals new events and verifies histories, with these keys (none: plain hashes)."""

    def __init__(
        self,
        keys: Sequence[ChainKey] = (),
        *,
        accept_plain: bool = False,
        accept_legacy: bool = False,
    ) -> None:
        ids = [k.key_id for k in keys]
        if len(set(ids)) != len(ids):
            raise ConfigurationError(f"chain key ids must differ: {', '.join(ids)}")
        self.keys = tuple(keys)
        # While a key is being introduced, events written before it (plain hashes) may
        # be accepted; an editor without the key could then rewrite a whole history.
        self.accept_plain = accept_plain or not keys
        # While histories and rows written before runs were bound to their id are being
        # sealed, they may be accepted; an editor without the key could then copy such a
        # history into another run, or strip a row of its check and edit it.
        self.accept_legacy = accept_legacy or not keys
        self._by_id = {k.key_id: k for k in keys}

    @property
    def keyed(self) -> bool:
        return bool(self.keys)

    def __repr__(self) -> str:
        return (
            f"Chain(keys={[k.key_id for k in self.keys]}, accept_plain={self.accept_plain}, "
            f"accept_legacy={self.accept_legacy})"
        )

    def describe(self) -> str:
        """What this chain proves, in a few words (for `runs verify`)."""
        if not self.keys:
            return "plain hashes: no chain key configured"
        plain = ", and plain hashes from before the key" if self.accept_plain else ""
        legacy = ", and legacy histories and rows" if self.accept_legacy else ""
        return f"keyed with {self.keys[0].key_id!r}{plain}{legacy}"

    def with_legacy(self) -> Chain:
        """This chain, accepting legacy histories and rows (to read them before sealing)."""
        return Chain(self.keys, accept_plain=self.accept_plain, accept_legacy=True)

    def genesis(self, tenant: str, run_id: str) -> str:
        """What the first event of the run's history chains to: keyed with the first key."""
        if self.keys:
            return keyed_genesis(self.keys[0], tenant, run_id)
        return plain_genesis(tenant, run_id)

    def begin(self, tenant: str, run_id: str, events: Iterable[NewEvent]) -> list[Event]:
        """Number and hash the first events of a run's history (a generation's)."""
        return self.seal(0, self.genesis(tenant, run_id), events)

    def mac(self, kind: str, parts: Sequence[str | None]) -> str:
        """The check a row of `kind` carries over its columns `parts` (which name its
        tenant and run): keyed with the first key, else plain."""
        if self.keys:
            return keyed_mac(self.keys[0], kind, parts)
        return plain_mac(kind, parts)

    def check_mac(self, stored: str | None, kind: str, parts: Sequence[str | None]) -> str | None:
        """Why a row whose check is `stored` does not hold the columns `parts`, or None."""
        if stored is None:
            return None if self.accept_legacy else LEGACY_ROW
        key_id, sep, _ = stored.partition(":")
        if sep:
            key = self._by_id.get(key_id)
            if key is None:
                known = ", ".join(self._by_id) or "none"
                return (
                    f"carries a check made with chain key {key_id[:32]!r}, which this process "
                    f"was not given (it has: {known})"
                )
            expected = keyed_mac(key, kind, parts)
        else:
            if not self.accept_plain:
                return (
                    "carries a check not made with a chain key: anyone who can edit the "
                    "database could have written it"
                )
            expected = plain_mac(kind, parts)
        if not hmac.compare_digest(expected.encode(), stored.encode("utf-8", "replace")):
            return (
                "does not match its check: edited, or copied from another run, by someone "
                "without the chain key"
            )
        return None

    def hash(self, prev_hash: str, seq: int, type_: str, ts: float, data_json: str) -> str:
        """The hash a new event gets: keyed with the first key, else plain."""
        if self.keys:
            return keyed_hash(self.keys[0], prev_hash, seq, type_, ts, data_json)
        return plain_hash(prev_hash, seq, type_, ts, data_json)

    def seal(self, prev_seq: int, prev_hash: str, events: Iterable[NewEvent]) -> list[Event]:
        """Number and hash new events that follow (prev_seq, prev_hash)."""
        sealed = []
        seq, h = prev_seq, prev_hash
        for ev in events:
            seq += 1
            text = ev.encode()
            h = self.hash(h, seq, ev.type, ev.ts, text)
            sealed.append(Event(seq, ev.type, ev.data, ev.ts, h, text))
        return sealed

    def _key_of(self, stored: str) -> tuple[ChainKey | None, str | None]:
        """The key a stored hash names (None: a plain hash), or why it cannot be used."""
        key_id, sep, _ = stored.partition(":")
        if not sep:
            if not self.accept_plain:
                return None, (
                    "not signed with a chain key: anyone who can edit the database could "
                    "have written it"
                )
            return None, None
        key = self._by_id.get(key_id)
        if key is None:
            known = ", ".join(self._by_id) or "none"
            return None, f"signed with chain key {key_id!r}, which this process was not given " + (
                f"(it has: {known})"
            )
        return key, None

    def check(self, prev_hash: str, ev: Event, text: str) -> str | None:
        """Why `ev` (whose data text is `text`) does not follow `prev_hash`, or None."""
        key, why = self._key_of(ev.hash)
        if why is not None:
            return why
        if key is not None:
            expected = keyed_hash(key, prev_hash, ev.seq, ev.type, ev.ts, text)
        else:
            expected = plain_hash(prev_hash, ev.seq, ev.type, ev.ts, text)
        if not hmac.compare_digest(expected.encode(), ev.hash.encode("utf-8", "replace")):
            return "hash does not match the event and its predecessor"
        return None

    def check_first(self, run: tuple[str, str], ev: Event, text: str) -> str | None:
        """Why `ev`, the first event of the history of `run` (tenant, run id), does not
        chain to the run's genesis, or None. A legacy genesis (the empty text) is
        accepted only where `accept_legacy` says so."""
        key, why = self._key_of(ev.hash)
        if why is not None:
            return why
        tenant, run_id = run
        bound = keyed_genesis(key, tenant, run_id) if key else plain_genesis(tenant, run_id)
        if self.check(bound, ev, text) is None:
            return None
        if self.check("", ev, text) is None:
            return None if self.accept_legacy else LEGACY_GENESIS
        return (
            "hash does not match the event and this run's genesis: the event was changed, "
            "or the history belongs to another run"
        )

    def verify(
        self,
        events: Sequence[Event],
        *,
        after_seq: int = 0,
        prev_hash: str = "",
        run: tuple[str, str] | None = None,
    ) -> list[ChainProblem]:
        """Check that `events` are numbered from `after_seq + 1` without gaps and chain.

        Each event's hash is recomputed from the stored data text, so an edit to
        the data, a removed event or two swapped events all show up. An event
        whose stored data is not JSON is reported (`Event.undecodable`). From the
        first event on (`after_seq` 0), `run` (tenant, run id) names whose history it
        is: the first event must chain to that run's genesis; later, `prev_hash` is
        the hash of the event at `after_seq`.
        """
        if after_seq == 0 and events and run is None:
            raise TypeError(
                "verifying a history from its first event needs run=(tenant, run_id): "
                "its genesis is bound to them"
            )
        problems: list[ChainProblem] = []
        prev = prev_hash
        for expected, ev in enumerate(events, start=after_seq + 1):
            if ev.seq != expected:
                problems.append(ChainProblem(ev.seq, f"expected event {expected}, found {ev.seq}"))
                break
            if ev.undecodable:
                problems.append(ChainProblem(ev.seq, "its stored data is not valid JSON"))
            text = ev.data_json if ev.data_json or ev.undecodable else ev.encode_data()
            if expected == 1 and run is not None:
                why = self.check_first(run, ev, text)
            else:
                why = self.check(prev, ev, text)
            if why is not None:
                problems.append(ChainProblem(ev.seq, why))
            prev = ev.hash
        return problems


def parse_keys(spec: str) -> list[ChainKey]:
    """Keys from `id:base64url-secret[,id:secret...]` (the first signs new events)."""
    keys = []
    written = "a chain key is written id:secret (the secret in URL-safe base64)"
    for key_id, encoded in key_list(spec, written):
        try:
            secret = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
        except (binascii.Error, ValueError):
            raise ConfigurationError(
                f"chain key {key_id[:32]!r}: the secret is not URL-safe base64"
            ) from None
        keys.append(ChainKey(key_id, secret))
    return keys


def _flag(env: Mapping[str, str], name: str) -> bool:
    return env.get(name, "").strip().lower() in ("1", "true", "yes")


def chain_from_environment(env: Mapping[str, str]) -> Chain:
    """The chain the environment configures (plain when it names no key);
    `WAYPOST_CHAIN_ACCEPT_PLAIN` and `WAYPOST_CHAIN_ACCEPT_LEGACY` are its migration modes."""
    return Chain(
        keys_from_environment(env),
        accept_plain=_flag(env, "WAYPOST_CHAIN_ACCEPT_PLAIN"),
        accept_legacy=_flag(env, "WAYPOST_CHAIN_ACCEPT_LEGACY"),
    )


def keys_from_environment(env: Mapping[str, str]) -> list[ChainKey]:
    """`WAYPOST_CHAIN_KEYS` (id:secret,...), or the file `WAYPOST_CHAIN_KEYS_FILE` names."""
    return parse_keys(secret_setting(env, "WAYPOST_CHAIN_KEYS"))


def seal(prev_seq: int, prev_hash: str, events: Iterable[NewEvent]) -> list[Event]:
    """Number and hash new events with plain hashes (`Chain().seal`)."""
    return PLAIN.seal(prev_seq, prev_hash, events)


def verify_chain(events: Sequence[Event], *, run: tuple[str, str]) -> list[ChainProblem]:
    """Problems in the plain-hashed history of `run` (tenant, run id) (`Chain().verify`)."""
    return PLAIN.verify(events, run=run)


PLAIN = Chain()
"""The chain without keys."""
