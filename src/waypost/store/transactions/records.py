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
from typing import Any

from waypost.errors import BrokenRecord, PayloadTampered, PlaintextRefused
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

from ..base import (
    ApprovalRecord,
    ClaimedTask,
    CredentialRecord,
    DefinitionRecord,
    OutboxItem,
    RunRecord,
    WorkerRecord,
)
from ..tx import Row, Tx, loads_nullable
from .row_checks import approval_row_problem, run_row_problems


def sealed(keys: Keys | None, text: str | None, place: Place) -> str | None:
    """How a payload's JSON text is stored: encrypted for `place` when there are keys."""
    if keys is None or text is None:
        return text
    return keys.seal(text, place)


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
    return RunRecord(
        tenant=tenant,
        run_id=run_id,
        workflow=row["workflow"],
        version=row["version"],
        status=row["status"],
        input=json.loads(input_json),
        input_json=input_json,
        result=loads_nullable(result),
        error=loads_nullable(error),
        waiting_for=json.loads(waiting_for) if waiting_for else [],
        last_seq=row["last_seq"],
        last_hash=row["last_hash"],
        processed_seq=row["processed_seq"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        finished_at=row["finished_at"],
        priority=row["priority"],
        history_bytes=row["history_bytes"],
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
    return ClaimedTask(
        kind=row["kind"],
        tenant=row["tenant"],
        run_id=row["run_id"],
        step=row["step"],
        queue=row["queue"],
        fence=row["fence"],
        attempt=row["attempt"],
        spec=loads_nullable(spec),
        deadline=row["deadline"],
        heartbeat_deadline=row["heartbeat_deadline"],
        visible_at=row["visible_at"],
        owner=row["owner"],
        heartbeat_details=loads_nullable(details),
        cancel_requested=bool(row["cancel_requested"]),
        lapses=row["lapses"],
    )


def worker_from_row(row: Row) -> WorkerRecord:
    return WorkerRecord(
        worker_id=row["worker_id"],
        host=row["host"],
        pid=row["pid"],
        queues=json.loads(row["queues"]),
        started_at=row["started_at"],
        heartbeat_at=row["heartbeat_at"],
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
    return ApprovalRecord(
        tenant=row["tenant"],
        approval_id=row["approval_id"],
        run_id=row["run_id"],
        step=row["step"],
        timer_step=row["timer_step"],
        name=row["name"],
        policy=json.loads(row["policy"]),
        status=row["status"],
        started_by=row["started_by"],
        data=loads_nullable(data),
        expires_at=row["expires_at"],
        created_at=row["created_at"],
        closed_at=row["closed_at"],
    )


def credential_from_row(row: Row) -> CredentialRecord:
    return CredentialRecord(
        tenant=row["tenant"],
        credential_id=row["credential_id"],
        approval_id=row["approval_id"],
        approver=row["approver"],
        action=row["action"],
        secret_hash=row["secret_hash"],
        status=row["status"],
        expires_at=row["expires_at"],
    )


def vote_from_row(row: Row) -> dict[str, Any]:
    return {
        "principal": row["principal"],
        "decision": row["decision"],
        "comment": row["comment"],
        "at": row["at"],
        # How the voter signed in and the credential that authenticated them ('' for votes
        # counted before they were recorded).
        "auth": row["auth"],
        "authenticated_by": row["authenticated_by"],
    }


def outbox_item_from_row(row: Row) -> OutboxItem:
    return OutboxItem(
        id=row["id"],
        tenant=row["tenant"],
        kind=row["kind"],
        payload=json.loads(row["payload"]),
        attempts=int(row["attempts"]),
    )


def definition_from_row(row: Row) -> DefinitionRecord:
    return DefinitionRecord(
        tenant=row["tenant"],
        name=row["name"],
        version=int(row["version"]),
        digest=row["digest"],
        body=json.loads(row["body"]),
        source=row["source"],
        published_at=row["published_at"],
        published_by=row["published_by"],
    )
