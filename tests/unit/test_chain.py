"""The hash chain, keyed and plain: known answers, what each kind finds, rotation."""

from __future__ import annotations

import base64
import dataclasses

import pytest

import waypost as wp
from waypost.model.chain import (
    Chain,
    ChainKey,
    chain_from_environment,
    keyed_hash,
    parse_keys,
    plain_hash,
)
from waypost.model.events import Event, EventType, NewEvent
from waypost.runtime.instance import idempotency_key

DATA = '{"input":{"id":7},"version":"1","workflow":"order"}'
K1 = ChainKey("k1", b"0123456789abcdef0123456789abcdef")
K2 = ChainKey("k2", b"fedcba9876543210fedcba9876543210")


def test_known_answers() -> None:
    """Fixed vectors, computed with sha256sum and `openssl dgst -hmac` from the format:
    prev_hash, then "\\x1e{seq}\\x1f{type}\\x1f{repr(ts)}\\x1f", then the data text."""
    assert (
        plain_hash("", 1, "RunStarted", 1700000000.25, DATA)
        == "a2dffc4f70315daccc54fa72d2dbd94e6469f2829ef93f44e3e4c4ed530a1bae"
    )
    assert (
        keyed_hash(K1, "", 1, "RunStarted", 1700000000.25, DATA)
        == "k1:64b72644080af123e81089bc953483dfca53a1c9823a52c5575b3262bb0d0cf8"
    )
    # sha256 of "acme\\0order-7\\03", first 40 hex digits
    assert idempotency_key("acme", "order-7", "3") == "wp-0d37934ba2f9b472e4c70c26a12369e1c84e1f3a"


RUN = ("acme", "order-7")


def history(chain: Chain, n: int = 4, run: tuple[str, str] = RUN) -> list[Event]:
    events = [
        NewEvent(EventType.SIGNAL_RECEIVED, {"name": "s", "n": i}, 100.0 + i) for i in range(n)
    ]
    return chain.begin(*run, events)


def edited(events: list[Event], seq: int, chain: Chain | None) -> list[Event]:
    """An editor changes event `seq`'s data and, with `chain`, recomputes the rest."""
    out = list(events)
    target = out[seq - 1]
    data = {**target.data, "n": 999}
    text = NewEvent(EventType(target.type), data, target.ts).encode()
    out[seq - 1] = dataclasses.replace(target, data=data, data_json=text)
    if chain is not None:
        prev = out[seq - 2].hash if seq > 1 else chain.genesis(*RUN)
        for i in range(seq - 1, len(out)):
            ev = out[i]
            text = ev.data_json
            out[i] = dataclasses.replace(ev, hash=chain.hash(prev, ev.seq, ev.type, ev.ts, text))
            prev = out[i].hash
    return out


def test_a_plain_chain_finds_an_edit_unless_the_editor_recomputes() -> None:
    plain = Chain()
    events = history(plain)
    assert plain.verify(events, run=RUN) == []
    assert [p.seq for p in plain.verify(edited(events, 2, None), run=RUN)] == [2]
    assert plain.verify(edited(events, 2, plain), run=RUN) == []  # what a plain chain cannot prove


def test_a_keyed_chain_finds_an_edit_by_anyone_without_the_key() -> None:
    keyed = Chain([K1])
    events = history(keyed)
    assert all(e.hash.startswith("k1:") for e in events)
    assert keyed.verify(events, run=RUN) == []
    assert [p.seq for p in keyed.verify(edited(events, 2, None), run=RUN)] == [2]
    # Recomputing with plain hashes (the editor has no key) is reported, event by event.
    forged = edited(events, 2, Chain())
    problems = keyed.verify(forged, run=RUN)
    assert [p.seq for p in problems] == [2, 3, 4]
    assert "not signed with a chain key" in problems[0].problem
    # Another key (guessed or of another deployment) does not verify either.
    other = edited(events, 2, Chain([ChainKey("k1", b"x" * 32)]))
    assert [p.seq for p in keyed.verify(other, run=RUN)] == [2, 3, 4]
    # Removing or swapping events breaks the numbering or the chain.
    assert (
        keyed.verify([events[0], events[2], events[3]], run=RUN)[0].problem
        == "expected event 2, found 3"
    )
    swapped = [
        events[0],
        dataclasses.replace(events[2], seq=2),
        dataclasses.replace(events[1], seq=3),
    ]
    assert keyed.verify(swapped, run=RUN) != []


def test_keys_rotate_and_an_unknown_key_is_named() -> None:
    old = history(Chain([K1]), 2)
    rotated = Chain([K2, K1])  # k2 signs new events, k1 still verifies
    new = rotated.seal(2, old[-1].hash, [NewEvent(EventType.SIGNAL_RECEIVED, {"n": 9}, 200.0)])
    both = [*old, *new]
    assert new[0].hash.startswith("k2:") and rotated.verify(both, run=RUN) == []
    problems = Chain([K2]).verify(both, run=RUN)
    assert [p.seq for p in problems] == [1, 2]
    assert "'k1', which this process was not given" in problems[0].problem
    assert "not given" in Chain().verify(both, run=RUN)[0].problem  # no key at all: cannot check


def test_plain_events_are_accepted_only_when_asked_during_a_key_introduction() -> None:
    before = history(Chain(), 2)
    after = Chain([K1]).seal(2, before[-1].hash, [NewEvent(EventType.SIGNAL_RECEIVED, {}, 9.0)])
    assert [p.seq for p in Chain([K1]).verify([*before, *after], run=RUN)] == [1, 2]
    assert Chain([K1], accept_plain=True).verify([*before, *after], run=RUN) == []


def test_undecodable_data_is_reported_not_raised() -> None:
    events = history(Chain([K1]), 3)
    broken = dataclasses.replace(events[1], data={}, data_json='{"n": 1', undecodable=True)
    problems = Chain([K1]).verify([events[0], broken, events[2]], run=RUN)
    assert [(p.seq, p.problem) for p in problems][:2] == [
        (2, "its stored data is not valid JSON"),
        (2, "hash does not match the event and its predecessor"),
    ]


def test_keys_are_read_from_text_and_the_environment(tmp_path: object) -> None:
    secret = base64.urlsafe_b64encode(b"s" * 32).decode().rstrip("=")
    assert [k.key_id for k in parse_keys(f"new:{secret}, old:{secret}")] == ["new", "old"]
    chain = chain_from_environment({"WAYPOST_CHAIN_KEYS": f"k9:{secret}"})
    assert chain.keyed and chain.keys[0].secret == b"s" * 32 and not chain.accept_plain
    assert "s" * 32 not in repr(chain) and secret not in repr(chain.keys[0])
    assert not chain_from_environment({}).keyed
    for bad, message in (
        ("k1", "id:secret"),
        ("k1:c2hvcnQ", "too short"),
        ("bad id!:" + secret, "not allowed"),
        (f"k1:{secret},k1:{secret}", "must differ"),
    ):
        with pytest.raises(wp.ConfigurationError, match=message):
            Chain(parse_keys(bad))


def test_the_first_event_chains_to_a_genesis_bound_to_its_tenant_and_run() -> None:
    for chain in (Chain(), Chain([K1])):
        events = history(chain)
        assert chain.verify(events, run=RUN) == []
        for elsewhere in (("acme", "order-8"), ("other", "order-7"), ("acme", "order-7 ")):
            problems = chain.verify(events, run=elsewhere)
            assert [p.seq for p in problems] == [1], elsewhere
            assert "belongs to another run" in problems[0].problem
        with pytest.raises(TypeError, match="run=\\(tenant, run_id\\)"):
            chain.verify(events)
        # Later events are checked from the one before, whoever's run it is.
        assert chain.verify(events[2:], after_seq=2, prev_hash=events[1].hash) == []
    assert Chain([K1]).genesis(*RUN) != Chain([K2]).genesis(*RUN) != Chain().genesis(*RUN)
    # The parts are kept apart: ("ab", "c") is not ("a", "bc").
    assert Chain().genesis("ab", "c") != Chain().genesis("a", "bc")


def test_a_legacy_genesis_is_accepted_without_a_key_and_with_one_only_while_migrating() -> None:
    signals = [NewEvent(EventType.SIGNAL_RECEIVED, {"n": i}, 1.0 + i) for i in range(3)]
    plain_legacy = Chain().seal(0, "", signals)  # as releases before the binding wrote it
    assert Chain().verify(plain_legacy, run=RUN) == []
    keyed_legacy = Chain([K1]).seal(0, "", signals)
    problems = Chain([K1]).verify(keyed_legacy, run=RUN)
    assert [p.seq for p in problems] == [1] and problems[0].problem.startswith("legacy genesis")
    migrating = Chain([K1], accept_legacy=True)
    assert migrating.verify(keyed_legacy, run=RUN) == []
    assert "legacy histories and rows" in migrating.describe()
    assert Chain([K1]).with_legacy().accept_legacy and not Chain([K1]).accept_legacy
    assert chain_from_environment(
        {"WAYPOST_CHAIN_KEYS": "k1:" + base64.urlsafe_b64encode(K1.secret).decode()}
        | {"WAYPOST_CHAIN_ACCEPT_LEGACY": "1"}
    ).accept_legacy


def test_a_row_check_holds_only_for_its_columns_kind_and_key() -> None:
    parts = ("acme", "order-7", "completed", '{"ok":true}', None)
    for chain in (Chain(), Chain([K1])):
        mac = chain.mac("run-state", parts)
        assert chain.check_mac(mac, "run-state", parts) is None
        for other in (
            ("acme", "order-7", "completed", '{"ok":false}', None),  # an edited result
            ("acme", "order-8", "completed", '{"ok":true}', None),  # another run's check
            ("acme", "order-7", "completed", '{"ok":true}', ""),  # None is not ""
        ):
            assert "does not match its check" in str(chain.check_mac(mac, "run-state", other))
        assert chain.check_mac(mac, "run-input", parts) is not None  # another kind of row
    keyed = Chain([K1])
    assert keyed.mac("run-state", parts).startswith("k1:")
    assert "not made with a chain key" in str(
        keyed.check_mac(Chain().mac("run-state", parts), "run-state", parts)
    )
    assert "'k1', which this process was not given" in str(
        Chain([K2]).check_mac(keyed.mac("run-state", parts), "run-state", parts)
    )
    assert "carries no check" in str(keyed.check_mac(None, "run-state", parts))
    assert Chain().check_mac(None, "run-state", parts) is None  # no key: legacy rows read
    assert Chain([K1], accept_legacy=True).check_mac(None, "run-state", parts) is None
