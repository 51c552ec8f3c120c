"""Continue-as-new in the store: a run's generation ends and the next begins, at once.

In the transaction of the decision that ends a generation (its last event is
RunContinuedAsNew), `begin_generation` deletes that generation's history, tasks, timers
and correlated waits, and writes the next one: a history of its own numbered from 1
(chained to the run's genesis; its RunStarted records the ended generation's number,
length and last hash, so the chains are linked inside the hashed history), the run's
snapshot reset to `running` with the new input (payloads sealed and the row's checks
written as any start writes them), and the workflow task with its fence moved on (leased
to the committing engine if it claims it). The run id, its creation time and its
priority stay. Nothing of the ended generation outlives the commit but that link: a
loop-forever workflow keeps a bounded history (decision 0010).
"""

from __future__ import annotations

from dataclasses import replace

from waypost.model.encryption import run_place
from waypost.model.events import RunStarted, canonical_json
from waypost.model.status import RunStatus

from ..commits import RunCommit
from ..effects import ContinueAsNew
from ..tx import TASKS, Row, Tx
from .records import sealed
from .row_checks import input_mac, state_mac
from .run_rows import event_rows, history_bytes


def begin_generation(
    tx: Tx, c: RunCommit, nxt: ContinueAsNew, wt: Row | None, last_seq: int, last_hash: str
) -> int:
    """Start the run's next generation (`nxt`); the workflow task's new fence if this
    commit claims it (`c.owner`), else 0 (the task is ready)."""
    key = {"tenant": c.tenant, "run_id": c.run_id}
    # Only the row's priority is read: nothing of it is opened (payloads may be sealed).
    row = tx.one("get_run", key)
    if row is None or wt is None:
        return 0  # cannot happen: the commit checked both
    link = {"generation": nxt.generation - 1, "last_seq": last_seq, "last_hash": last_hash}
    started = replace(RunStarted.parse(nxt.started), continued_from=link).at(nxt.started.ts)
    for query in ("purge_run_events", "delete_run_tasks", "delete_run_timers"):
        tx.run(query, key)
    tx.run("delete_run_correlations", key)
    events = tx.chain.begin(c.tenant, c.run_id, [started, *nxt.signals])
    tx.many("insert_event", event_rows(tx, c.tenant, c.run_id, events))  # sealed with keys
    input_json = canonical_json(nxt.input)
    running = RunStatus.RUNNING.value
    tx.run(
        "continue_run_row",
        {
            **key,
            "input": sealed(tx.keys, input_json, run_place(c.tenant, c.run_id, "input")),
            "input_mac": input_mac(tx.chain, c.tenant, c.run_id, row["workflow"], input_json),
            "state_mac": state_mac(tx.chain, c.tenant, c.run_id, running, None, None),
            "status": running,
            "last_seq": events[-1].seq,
            "last_hash": events[-1].hash,
            "now": c.now,
            "history_bytes": history_bytes(events),
        },
    )
    claimed = c.owner is not None and (c.claim_queues is None or wt["queue"] in c.claim_queues)
    fence = int(wt["fence"]) + 1
    if not claimed:
        tx.notify(TASKS)
    tx.run(
        "insert_workflow_task",
        {
            **key,
            "queue": wt["queue"],
            "state": "leased" if claimed else "ready",
            "visible_at": c.now + c.lease if claimed else c.now,
            "owner": c.owner if claimed else None,
            "fence": fence,
            "now": c.now,
            "priority": row["priority"],
        },
    )
    return fence if claimed else 0
