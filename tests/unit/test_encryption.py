"""Payload encryption's cipher and keys: sealing, binding to a place, rotation, settings."""

from __future__ import annotations

import base64
import logging
import secrets
from pathlib import Path

import pytest

import waypost as wp
from waypost.model.encryption import (
    PREFIX,
    event_place,
    keys_from_environment,
    open_text,
    parse_keys,
    run_place,
    sealed_key_id,
)

K1 = secrets.token_bytes(32)
K2 = secrets.token_bytes(32)
PLACE = event_place("acme", "order-1", 3)


def b64(key: bytes) -> str:
    return base64.b64encode(key).decode()


def test_a_sealed_value_opens_only_where_it_was_sealed() -> None:
    keys = wp.Keys({"k1": K1})
    text = '{"card":"4111-MARKER"}'
    sealed = keys.seal(text, PLACE)
    assert sealed.startswith(f"{PREFIX}k1:") and "MARKER" not in sealed
    assert keys.open(sealed, PLACE) == text
    assert keys.seal(text, PLACE) != sealed  # a fresh nonce each time
    for elsewhere in (
        event_place("acme", "order-1", 4),  # another event of the run
        event_place("acme", "order-2", 3),  # another run
        event_place("globex", "order-1", 3),  # another tenant
        run_place("acme", "order-1", "input"),  # another column
    ):
        with pytest.raises(wp.PayloadTampered) as err:
            keys.open(sealed, elsewhere)
        assert "MARKER" not in str(err.value) and sealed[8:30] not in str(err.value)


def test_an_edited_ciphertext_fails_authentication() -> None:
    keys = wp.Keys({"k1": K1})
    sealed = keys.seal('{"a":1}', PLACE)
    flipped = sealed[:-3] + ("A" if sealed[-3] != "A" else "B") + sealed[-2:]
    for bad in (flipped, sealed[:-4], f"{PREFIX}k1:!!!", f"{PREFIX}k1:", PREFIX, f"{PREFIX}k1"):
        with pytest.raises(wp.PayloadTampered):
            keys.open(bad, PLACE)


def test_plaintext_passes_unchanged_only_in_the_migration_mode_and_is_resealed() -> None:
    assert open_text(None, "null", PLACE) == "null"  # no keys: plaintext is what is stored
    keys = wp.Keys({"k1": K1})
    # With keys, plaintext where a sealed value belongs is refused, naming where it is;
    # re-encryption does not seal it either (it could be anyone's).
    for refused in (lambda: keys.open('{"a":1}', PLACE), lambda: keys.reseal('{"a":1}', PLACE)):
        with pytest.raises(wp.PlaintextRefused, match="WAYPOST_ENCRYPTION_ACCEPT_PLAINTEXT") as e:
            refused()
        assert "events.data of event 3 of run 'order-1' (tenant 'acme')" in str(e.value)
        assert '"a"' not in str(e.value)  # the value itself is never quoted
    migrating = wp.Keys({"k1": K1}, accept_plaintext=True)
    assert migrating.open('{"a":1}', PLACE) == '{"a":1}'
    resealed = migrating.reseal('{"a":1}', PLACE)
    assert resealed is not None and keys.open(resealed, PLACE) == '{"a":1}'
    assert migrating.reseal(resealed, PLACE) is None  # under the current key already


def test_the_migration_mode_is_read_from_the_environment() -> None:
    spec = "k1:" + base64.b64encode(K1).decode()
    strict = keys_from_environment({"WAYPOST_ENCRYPTION_KEYS": spec})
    assert strict is not None and not strict.accept_plaintext
    env = {"WAYPOST_ENCRYPTION_KEYS": spec, "WAYPOST_ENCRYPTION_ACCEPT_PLAINTEXT": "1"}
    migrating = keys_from_environment(env)
    assert migrating is not None and migrating.accept_plaintext


def test_keys_rotate_old_values_still_open_and_reseal_under_the_new_key() -> None:
    old = wp.Keys({"k1": K1})
    sealed = old.seal("[1,2]", PLACE)
    both = wp.Keys({"k2": K2, "k1": K1})
    assert both.current == "k2"
    assert both.open(sealed, PLACE) == "[1,2]"
    moved = both.reseal(sealed, PLACE)
    assert moved is not None and sealed_key_id(moved) == "k2"
    assert wp.Keys({"k2": K2}).open(moved, PLACE) == "[1,2]"
    assert wp.Keys({"k1": K1, "k2": K2}, current="k2").current == "k2"


def test_an_unknown_key_id_is_named_and_nothing_of_the_payload_is_shown() -> None:
    sealed = wp.Keys({"k1": K1}).seal('"MARKER"', PLACE)
    for keys in (wp.Keys({"k9": K2}), None):
        with pytest.raises(wp.EncryptionKeyMissing) as err:
            open_text(keys, sealed, PLACE)
        message = str(err.value)
        assert "'k1'" in message and err.value.key_id == "k1"
        assert "MARKER" not in message and sealed[9:] not in message
    with pytest.raises(wp.EncryptionKeyMissing, match="it has: k9"):
        open_text(wp.Keys({"k9": K2}), sealed, PLACE)


@pytest.mark.parametrize(
    ("keys", "current", "words"),
    [
        ({}, None, "at least one key"),
        ({"k1": b"short"}, None, "32 bytes"),
        ({"k1": K1 + b"x"}, None, "32 bytes"),
        ({"bad id": K1}, None, "not allowed"),
        ({"k\n1": K1}, None, "not allowed"),
        ({"x" * 33: K1}, None, "not allowed"),
        ({"k1": K1}, "k2", "not among"),
    ],
)
def test_bad_keys_are_refused(keys: dict[str, bytes], current: str | None, words: str) -> None:
    with pytest.raises(wp.ConfigurationError, match=words):
        wp.Keys(keys, current=current)


def test_keys_from_the_environment_first_is_current(tmp_path: Path) -> None:
    assert keys_from_environment({}) is None
    keys = keys_from_environment({"WAYPOST_ENCRYPTION_KEYS": f"k2:{b64(K2)}, k1:{b64(K1)}"})
    assert keys is not None and keys.current == "k2" and keys.ids == ("k2", "k1")
    urlsafe = base64.urlsafe_b64encode(K1).decode().rstrip("=")
    assert parse_keys(f"k1:{urlsafe}") is not None
    path = tmp_path / "keys"
    path.write_text(f"k1:{b64(K1)}\n")
    from_file = keys_from_environment({"WAYPOST_ENCRYPTION_KEYS_FILE": str(path)})
    assert from_file is not None and from_file.current == "k1"
    sealed = keys.seal("1", PLACE)
    assert from_file.open(wp.Keys({"k1": K1}).seal("1", PLACE), PLACE) == "1"
    assert keys.open(sealed, PLACE) == "1"


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("k1", "id:base64"),
        ("k1:***", "not base64"),
        (f"k1:{b64(K1)},k1:{b64(K2)}", "listed twice"),
        ("k1:" + b64(b"x" * 16), "32 bytes"),
    ],
    ids=["no secret", "not base64", "listed twice", "short"],  # the keys are random
)
def test_bad_key_settings_are_refused(spec: str, words: str) -> None:
    with pytest.raises(wp.ConfigurationError, match=words) as err:
        parse_keys(spec)
    assert b64(K1) not in str(err.value)


def test_both_settings_or_an_unreadable_file_are_refused(tmp_path: Path) -> None:
    with pytest.raises(wp.ConfigurationError, match="not both"):
        keys_from_environment(
            {"WAYPOST_ENCRYPTION_KEYS": f"k1:{b64(K1)}", "WAYPOST_ENCRYPTION_KEYS_FILE": "x"}
        )
    with pytest.raises(wp.ConfigurationError, match="cannot read"):
        keys_from_environment({"WAYPOST_ENCRYPTION_KEYS_FILE": str(tmp_path / "missing")})


def test_the_keys_repr_shows_no_secret() -> None:
    text = repr(wp.Keys({"k1": K1}))
    assert "k1" in text and K1.hex() not in text and b64(K1) not in text


def test_encryption_under_a_plain_chain_is_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="waypost.encryption")
    wp.AsyncEngine(f"sqlite:///{tmp_path / 'plain.db'}", encryption=wp.Keys({"k1": K1}))
    assert any("set a chain key" in r.getMessage() for r in caplog.records)
    caplog.clear()
    chain = wp.Chain([wp.ChainKey("c1", secrets.token_bytes(32))])
    wp.AsyncEngine(
        f"sqlite:///{tmp_path / 'keyed.db'}", encryption=wp.Keys({"k1": K1}), chain=chain
    )
    wp.AsyncEngine(f"sqlite:///{tmp_path / 'off.db'}")
    assert not caplog.records
