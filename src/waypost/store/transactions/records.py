"""Rows into the store's records, read by column name.

One converter per record; the names are the columns (or aliases) the SELECTs of
`sql/queries.sql` and `sql/<dialect>/queries.sql` give, the same in every dialect.
JSON columns are parsed here, so the records hold Python values.

Payload columns (a run's input, result and error, an event's data, a task's
spec and heartbeat details, an approval's data) are sealed here on the way in
when the store has encryption keys (`sealed`) and opened on the way out, so
nothing above the store sees a ciphertext (`waypost.model.encryption`); with
keys, plaintext in such a column is refused (`PlaintextRefused`).

A run's row and an approval's row are checked against their MACs under the chain
key as they are read (`row_checks.py`): one that fails is `BrokenRecord`, its
values never returned (`checked=False` reads it anyway, for `verify` and for the
engine suspending the run).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import cache
from typing import Any, TypeVar

from waypost.errors import (
    BrokenRecord,
    ConfigurationError,
    PayloadTampered,
    PlaintextRefused,
)
from waypost.model.encryption import (
    PREFIX,
    Keys,
    Place,
    approval_place,
    event_place,
    open_text,
    run_place,
    task_place,
)
from waypost.model.events import Event
from waypost.model.identity import preview

from ..commits import ClaimedTask, RunRecord, WorkerRecord
from ..rows import ApprovalRecord, CredentialRecord, DefinitionRecord, OutboxItem
from ..tx import Row, Tx, loads_nullable
from .row_checks import approval_row_problem, run_row_problems

_R = TypeVar("_R")


@cache
def _names(columns: str) -> tuple[str, ...]:
    return tuple(columns.split())


def from_row(record: Callable[..., _R], row: Row, columns: str, /, **given: Any) -> _R:
    """`record` made of the `given` fields and, for each name in `columns` (separated by
    spaces), the row's column of that name as it is."""
    return record(**{name: row[name] for name in _names(columns)}, **given)


def sealed(keys: Keys | None, text: str | None, place: Place) -> str | None:
    """How a payload's JSON text is stored: encrypted for `place` when there are keys."""
    if keys is None or text is None:
        return text
    return keys.seal(text, place)


def reseal_column(
    tx: Tx,
    tenant: str,
    dry_run: bool,
    rows: str,
    key: tuple[str, str],
    write: str,
    place: Callable[[str, str], Place],
) -> tuple[int, int]:
    """Each value of the tenant's rows (`rows`: the query; `key`: its key column and its
    sealed column) sealed again under the current key, or sealed if stored in plaintext
    before encryption was on: (rows, re-sealed). Each write (`write`) is conditioned on the
    text read; a missing key or a forged ciphertext stops the transaction, as for runs."""
    keys = tx.keys
    if keys is None:
        raise ConfigurationError("re-encrypting needs encryption keys (WAYPOST_ENCRYPTION_KEYS)")
    id_column, column = key
    found = resealed = 0
    for row in tx.all(rows, {"tenant": tenant}):
        found += 1
        old, row_id = row[column], row[id_column]
        new = keys.reseal(old, place(tenant, row_id))
        if new is None:
            continue
        resealed += 1
        if not dry_run:
            tx.run(write, {"tenant": tenant, id_column: row_id, "old": old, "new": new})
    return found, resealed


def _is_sealed(text: str | None) -> bool:
    return text is not None and text.startswith(PREFIX)


def opened(keys: Keys | None, text: str | None, place: Place) -> str | None:
    """A payload column's plaintext: a sealed value opened, plaintext refused once there
    are keys (unless they accept it, while migrating)."""
    if text is None or (keys is None and not text.startswith(PREFIX)):
        return text
    return open_text(keys, text, place)


def run_texts(row: Row, keys: Keys | None) -> tuple[str, str | None, str | None]:
    """The plaintext JSON of a run row's input, result and error."""
    tenant, run_id = row["tenant"], row["run_id"]
    input_json = row["input"]
    if keys is not None or input_json.startswith(PREFIX):
        input_json = open_text(keys, input_json, run_place(tenant, run_id, "input"))
    result = opened(keys, row["result"], run_place(tenant, run_id, "result"))
    error = opened(keys, row["error"], run_place(tenant, run_id, "error"))
    return input_json, result, error


def run_from_row(row: Row, tx: Tx, *, checked: bool = True) -> RunRecord:
    """The run of `row`; `BrokenRecord` if its row fails its checks (unless not `checked`)."""
    tenant, run_id = row["tenant"], row["run_id"]
    input_json, result, error = run_texts(row, tx.keys)
    if checked:
        problems = run_row_problems(tx.chain, row, input_json, result, error)
        if problems:
            raise BrokenRecord(
                f"run {preview(run_id)} of tenant {preview(tenant)}: {'; '.join(problems)}. "
                "Its values are not returned"
            )
    waiting_for = row["waiting_for"]
    return from_row(
        RunRecord,
        row,
        "tenant run_id workflow version status last_seq last_hash processed_seq created_at"
        " updated_at finished_at priority history_bytes",
        input=json.loads(input_json),
        input_json=input_json,
        result=loads_nullable(result),
        error=loads_nullable(error),
        waiting_for=json.loads(waiting_for) if waiting_for else [],
    )


def event_from_row(row: Row, keys: Keys | None = None, tenant: str = "", run_id: str = "") -> Event:
    data_json = row["data"]
    try:
        if isinstance(data_json, str) and (keys is not None or data_json.startswith(PREFIX)):
            # A missing key raises (a setting to fix, not a broken history), and so does
            # plaintext where keys are set (`PlaintextRefused`, naming the event); a
            # ciphertext that fails authentication is reported like an edited text.
            data_json = open_text(keys, data_json, event_place(tenant, run_id, row["seq"]))
        data = json.loads(data_json)
        undecodable = not isinstance(data, dict)
    except PlaintextRefused:
        raise
    except (TypeError, ValueError, PayloadTampered):  # damaged or edited: the chain check says
        undecodable = True
    if undecodable:
        data = {}
    return Event(
        seq=row["seq"],
        type=row["type"],
        data=data,
        ts=row["ts"],
        hash=row["hash"],
        data_json=data_json if isinstance(data_json, str) else "",
        undecodable=undecodable,
    )


def task_from_row(row: Row, keys: Keys | None = None) -> ClaimedTask:
    spec, details = row["spec"], row["heartbeat_details"]
    if keys is not None or _is_sealed(spec) or _is_sealed(details):
        tenant, run_id, step = row["tenant"], row["run_id"], row["step"]
        spec = opened(keys, spec, task_place(tenant, run_id, step, "spec"))
        details = opened(keys, details, task_place(tenant, run_id, step, "heartbeat_details"))
    return from_row(
        ClaimedTask,
        row,
        "kind tenant run_id step queue fence attempt deadline heartbeat_deadline visible_at"
        " owner lapses",
        spec=loads_nullable(spec),
        heartbeat_details=loads_nullable(details),
        cancel_requested=bool(row["cancel_requested"]),
    )


def worker_from_row(row: Row) -> WorkerRecord:
    return from_row(
        WorkerRecord,
        row,
        "worker_id host pid started_at heartbeat_at",
        queues=json.loads(row["queues"]),
    )


def approval_from_row(row: Row, tx: Tx, *, checked: bool = True) -> ApprovalRecord:
    """The approval of `row`; `BrokenRecord` if its row fails its check (unless not
    `checked`)."""
    place = approval_place(row["tenant"], row["run_id"], row["approval_id"])
    data = opened(tx.keys, row["data"], place)
    if checked:
        problem = approval_row_problem(tx.chain, row, data)
        if problem is not None:
            raise BrokenRecord(
                f"approval {preview(row['approval_id'])} of run {preview(row['run_id'])} "
                f"(tenant {preview(row['tenant'])}): {problem}. Its values are not returned"
            )
    return from_row(
        ApprovalRecord,
        row,
        "tenant approval_id run_id step timer_step name status started_by expires_at"
        " created_at closed_at",
        policy=json.loads(row["policy"]),
        data=loads_nullable(data),
    )


def credential_from_row(row: Row) -> CredentialRecord:
    return from_row(
        CredentialRecord,
        row,
        "tenant credential_id approval_id approver action secret_hash status expires_at",
    )


def vote_from_row(row: Row) -> dict[str, Any]:
    # `auth` and `authenticated_by`: how the voter signed in and the credential that
    # authenticated them ('' for votes counted before they were recorded).
    return from_row(dict, row, "principal decision comment at auth authenticated_by")


def outbox_item_from_row(row: Row) -> OutboxItem:
    return OutboxItem(
        id=row["id"],
        tenant=row["tenant"],
        kind=row["kind"],
        payload=json.loads(row["payload"]),
        attempts=int(row["attempts"]),
    )


def definition_from_row(row: Row) -> DefinitionRecord:
    return from_row(
        DefinitionRecord,
        row,
        "tenant name digest source published_at published_by",
        version=int(row["version"]),
        body=json.loads(row["body"]),
    )
