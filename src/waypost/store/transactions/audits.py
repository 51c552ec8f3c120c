"""A run judged whole (`audit_run`, for `verify`), and a legacy run bound to its id
(`seal_legacy_run`, decision 0030).

`audit_run` reads what the row converters would refuse: the run's row and its
approvals' rows with what fails their checks, beside the history, so that `verify`
can say what is wrong instead of only refusing.

`seal_legacy_run` is what a key holder runs once over runs written before histories
and rows were bound to their run: the run's history (its first event chained to the
empty text) is hashed again from the run's genesis under the current chain key, and
its row and its approvals' rows that carry no check get one. Nothing is sealed that
could have been edited: the history must verify as a legacy one, the rows' existing
checks must hold, and the row must say what the history says (its input, its end);
otherwise the run is left as it is and the answer says why. The run's row is read first
with `run_head` (PostgreSQL locks it there, as every commit does), so no commit of
the run interleaves; one whose engine held the old hashes fails its sequence check and
reads the run again.
"""

from __future__ import annotations

from waypost.model.audit import snapshot_disagreements
from waypost.model.chain import Chain
from waypost.model.encryption import approval_place

from ..audits import LegacySeal, RunAudit
from ..tx import Row, Tx, loads_nullable
from .records import opened, run_texts
from .row_checks import approval_mac, approval_row_problem, input_mac, run_row_problems, state_mac
from .runs import load_history

_ALL = 2**31 - 1


def _approval_rows(tx: Tx, tenant: str, run_id: str) -> list[Row]:
    params = {"tenant": tenant, "status": None, "run_id": run_id, "limit": _ALL}
    return tx.all("list_approvals", params)


def _approval_data(tx: Tx, row: Row) -> str | None:
    return opened(
        tx.keys, row["data"], approval_place(row["tenant"], row["run_id"], row["approval_id"])
    )


def audit_run(tx: Tx, tenant: str, run_id: str) -> RunAudit | None:
    """The run's row and history as stored, and what fails the checks of its rows."""
    row = tx.one("get_run", {"tenant": tenant, "run_id": run_id})
    if row is None:
        return None
    input_json, result, error = run_texts(row, tx.keys)
    problems = [
        f"the run's row: {p}" for p in run_row_problems(tx.chain, row, input_json, result, error)
    ]
    for ap in _approval_rows(tx, tenant, run_id):
        why = approval_row_problem(tx.chain, ap, _approval_data(tx, ap))
        if why is not None:
            problems.append(f"approval {ap['approval_id']!r}: {why}")
    return RunAudit(
        status=row["status"],
        input_json=input_json,
        result=loads_nullable(result),
        error=loads_nullable(error),
        last_seq=row["last_seq"],
        last_hash=row["last_hash"],
        events=load_history(tx, tenant, run_id),
        problems=problems,
    )


def seal_legacy_run(tx: Tx, tenant: str, run_id: str, dry_run: bool) -> LegacySeal | None:
    """Bind a legacy run to its id (see the module's text); None if there is no such run."""
    key = {"tenant": tenant, "run_id": run_id}
    head = tx.one("run_head", key)  # PostgreSQL: the run's row locked, as a commit locks it
    row = tx.one("get_run", key)
    if head is None or row is None:
        return None
    legacy = tx.chain.with_legacy()
    events = load_history(tx, tenant, run_id)
    found = legacy.verify(events, run=(tenant, run_id))
    if found:
        return LegacySeal(refused=f"its history fails at event {found[0].seq}: {found[0].problem}")
    last = (events[-1].seq, events[-1].hash) if events else (0, "")
    if (row["last_seq"], row["last_hash"]) != last:
        return LegacySeal(refused="its row does not point at the last event of its history")
    input_json, result, error = run_texts(row, tx.keys)
    problems = [
        f"the run's row: {p}"
        for p in [
            *run_row_problems(legacy, row, input_json, result, error),
            *snapshot_disagreements(
                row["status"], input_json, loads_nullable(result), loads_nullable(error), events
            ),
        ]
    ]
    approvals = _approval_rows(tx, tenant, run_id)
    data = {ap["approval_id"]: _approval_data(tx, ap) for ap in approvals}
    for ap in approvals:
        why = approval_row_problem(legacy, ap, data[ap["approval_id"]])
        if why is not None:
            problems.append(f"approval {ap['approval_id']!r}: {why}")
    if problems:
        return LegacySeal(refused=problems[0])
    # Hashed again unless already bound to its run (whatever this chain accepts meanwhile).
    bound = Chain(tx.chain.keys, accept_plain=tx.chain.accept_plain)
    rehashed = bool(bound.verify(events, run=(tenant, run_id)))
    unchecked = row["input_mac"] is None or row["state_mac"] is None
    bare = [ap for ap in approvals if ap["mac"] is None]
    if dry_run:
        return LegacySeal(rehashed=rehashed, rows=int(unchecked) + len(bare))
    if rehashed:
        prev = tx.chain.genesis(tenant, run_id)
        for ev in events:
            text = ev.data_json or ev.encode_data()
            new = tx.chain.hash(prev, ev.seq, ev.type, ev.ts, text)
            tx.run("rehash_event", {**key, "seq": ev.seq, "old": ev.hash, "new": new})
            prev = new
        moved = tx.run("rehash_run_head", {**key, "last_seq": last[0], "old": last[1], "new": prev})
        if moved != 1:  # the row was read under its lock just now
            raise RuntimeError(f"the head of run {run_id!r} moved while it was sealed")
    if unchecked:
        tx.run(
            "seal_run_row",
            {
                **key,
                "input_mac": input_mac(tx.chain, tenant, run_id, row["workflow"], input_json),
                "state_mac": state_mac(tx.chain, tenant, run_id, row["status"], result, error),
            },
        )
    for ap in bare:
        mac = approval_mac(tx.chain, ap, data[ap["approval_id"]])
        tx.run(
            "seal_approval_row", {"tenant": tenant, "approval_id": ap["approval_id"], "mac": mac}
        )
    return LegacySeal(rehashed=rehashed, rows=int(unchecked) + len(bare))
