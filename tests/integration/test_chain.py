"""A keyed history on both stores: it verifies, an edit by someone without the key is
found, and a run whose stored history fails the check is suspended, never replayed."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

import waypost as wp
from tests.helpers import db_query, db_write, eventually, of_type
from waypost.model.chain import Chain, ChainKey

pytestmark = pytest.mark.timeout(120)

KEYED = Chain([ChainKey("k1", b"k" * 32)])


@wp.workflow(name="chained")
async def chained(ctx: wp.WorkflowContext) -> list[Any]:
    first = await ctx.wait_signal("a")
    second = await ctx.wait_signal("b")
    return [first, second]


def waiting_for_b(engine: Any, run_id: str) -> None:
    eventually(
        lambda: any(w.get("name") == "b" for w in engine.get(run_id).waiting_for),
        "the run to wait for signal b",
    )


def signalled_a(engine: Any, payload: str) -> Any:
    """A run of `chained` that got signal a with `payload` and waits for b (the engine
    runs meanwhile)."""
    with engine.running():
        run = engine.start(chained)
        engine.signal(run.run_id, "a", payload)
        waiting_for_b(engine, run.run_id)
    return run


def keyed_and_left(make_engine: Any, payload: str) -> Any:
    """`signalled_a` on an engine with the KEYED chain, closed after."""
    engine = make_engine(chained, chain=KEYED)
    run = signalled_a(engine, payload)
    engine.close()
    return run


def forge(db_url: str, engine: Any, run_id: str, chain: Chain) -> None:
    """Change the first signal's payload and rehash from there on with `chain`."""
    events = engine.history(run_id)
    prev = events[0].hash
    for ev in events[1:]:
        if ev.type == "SignalReceived" and ev.data["name"] == "a":
            ev = dataclasses.replace(ev, data={**ev.data, "payload": "alice"})
        text = _text(ev)
        new_hash = chain.hash(prev, ev.seq, ev.type, ev.ts, text)
        db_write(
            db_url,
            "UPDATE events SET data = ?, hash = ? WHERE tenant = ? AND run_id = ? AND seq = ?",
            (text, new_hash, "default", run_id, ev.seq),
        )
        prev = new_hash
    db_write(
        db_url,
        "UPDATE runs SET last_hash = ? WHERE tenant = ? AND run_id = ?",
        (prev, "default", run_id),
    )


def _text(ev: wp.Event) -> str:
    from waypost.model.events import canonical_json

    return canonical_json(ev.data)


def test_an_edit_without_the_key_is_found_and_the_run_is_never_fed_forged_data(
    make_engine: Any, db_url: str
) -> None:
    engine = make_engine(chained, chain=KEYED)
    with engine.running():
        run = engine.start(chained)
        engine.signal(run.run_id, "a", "mallory")
        waiting_for_b(engine, run.run_id)
        assert all(e.hash.startswith("k1:") for e in engine.history(run.run_id))
        assert engine.verify(run.run_id) == []

        # Someone who can write the database, but has no key, rewrites the payload and
        # recomputes the chain the only way they can: with plain hashes.
        forge(db_url, engine, run.run_id, Chain())
        problems = engine.verify(run.run_id)
        assert problems and problems[0].seq == 2
        assert "not signed with a chain key" in problems[0].problem

        # The next event makes the engine look at the run: it is suspended, not replayed.
        engine.signal(run.run_id, "b", "bob")
        info = eventually(
            lambda: (i := engine.get(run.run_id)).status is wp.RunStatus.SUSPENDED and i,
            "the run to be suspended",
        )
    assert info.error is not None and info.error["type"] == "BrokenHistory"
    assert "integrity check at event 2" in info.error["message"]
    history = engine.history(run.run_id)
    assert of_type(history, "RunCompleted") == []
    assert history[-1].type == "RunSuspended" and history[-1].hash.startswith("k1:")


def test_a_plain_chain_cannot_tell_a_recomputed_edit(make_engine: Any, db_url: str) -> None:
    """What the guide says of plain hashes: an editor who recomputes them is not found."""
    engine = make_engine(chained)
    run = signalled_a(engine, "mallory")
    forge(db_url, engine, run.run_id, Chain())
    assert engine.verify(run.run_id) == []


def test_stored_data_that_is_not_json_is_reported_and_suspends_the_run(
    make_engine: Any, db_url: str
) -> None:
    run = keyed_and_left(make_engine, "mallory")
    db_write(
        db_url,
        "UPDATE events SET data = ? WHERE tenant = ? AND run_id = ? AND seq = ?",
        ('{"name": "a", "payload": ', "default", run.run_id, 2),
    )
    engine = make_engine(chained, chain=KEYED)
    problems = engine.verify(run.run_id)
    assert (2, "its stored data is not valid JSON") in [(p.seq, p.problem) for p in problems]
    assert [e.seq for e in engine.history(run.run_id)] == [1, 2]  # still readable
    with engine.running():
        engine.signal(run.run_id, "b", "bob")  # the engine replays the run from the store
        info = eventually(
            lambda: (i := engine.get(run.run_id)).status is wp.RunStatus.SUSPENDED and i,
            "the run to be suspended",
        )
    assert info.error is not None and info.error["type"] == "BrokenHistory"
    # Suspended once: the engine does not loop on it.
    assert len(of_type(engine.history(run.run_id), "RunSuspended")) == 1


def test_an_engine_without_the_key_suspends_a_keyed_run_instead_of_trusting_it(
    make_engine: Any, db_url: str
) -> None:
    run = keyed_and_left(make_engine, "x")
    k2 = ChainKey("k2", b"z" * 32)
    other = make_engine(chained, chain=Chain([k2]))
    with other.running():
        other.signal(run.run_id, "b", "y")
        eventually(
            lambda: (
                db_query(db_url, "SELECT status FROM runs WHERE run_id = ?", (run.run_id,))
                == [("suspended",)]
            ),
            "the run to be suspended",
        )
        # Nor does it answer the run's row, whose checks it cannot verify either.
        with pytest.raises(wp.BrokenRecord, match="'k1', which this process was not given"):
            other.get(run.run_id)
    other.close()
    both = make_engine(chained, chain=Chain([k2, *KEYED.keys]))
    info = both.get(run.run_id)
    assert info.status is wp.RunStatus.SUSPENDED
    assert info.error is not None and "'k1', which this process was not given" in str(info.error)
