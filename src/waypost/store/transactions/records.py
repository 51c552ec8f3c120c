"""Rows into the store's records, read by column name.

One converter per record; the names are the columns (or aliases) the SELECTs of
`sql/<dialect>/queries.sql` give, the same in every dialect. JSON columns are
parsed here, so the records hold Python values.

Payload columns (a run's input, result and error, an event's data, a task's
spec and heartbeat details, an approval's data) are sealed here on the way in
when the store has encryption keys (`sealed`) and opened on the way out, so
nothing above the store sees a ciphertext (`waypost.model.encryption`).
"""

from __future__ import annotations

import json
from typing import Any

from waypost.errors import PayloadTampered
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

from ..base import (
    ApprovalRecord,
    ClaimedTask,
    CredentialRecord,
    DefinitionRecord,
    OutboxItem,
    RunRecord,
    WorkerRecord,
)
from ..tx import Row, loads_nullable


def sealed(keys: Keys | None, text: str | None, place: Place) -> str | None:
    """How a payload's JSON text is stored: encrypted for `place` when there are keys."""
    if keys is None or text is None:
        return text
    return keys.seal(text, place)


def _is_sealed(text: str | None) -> bool:
    return text is not None and text.startswith(PREFIX)


def _opened(keys: Keys | None, text: str | None, place: Place) -> str | None:
    if text is None or not text.startswith(PREFIX):
        return text
    return open_text(keys, text, place)


def run_from_row(row: Row, keys: Keys | None = None) -> RunRecord:
    tenant, run_id = row["tenant"], row["run_id"]
    input_json = row["input"]
    result, error = row["result"], row["error"]
    if input_json.startswith(PREFIX) or _is_sealed(result) or _is_sealed(error):
        input_json = open_text(keys, input_json, run_place(tenant, run_id, "input"))
        result = _opened(keys, result, run_place(tenant, run_id, "result"))
        error = _opened(keys, error, run_place(tenant, run_id, "error"))
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
    )


def event_from_row(row: Row, keys: Keys | None = None, tenant: str = "", run_id: str = "") -> Event:
    data_json = row["data"]
    try:
        if isinstance(data_json, str) and data_json.startswith(PREFIX):
            # A missing key raises (a setting to fix, not a broken history); a
            # ciphertext that fails authentication is reported like an edited text.
            data_json = open_text(keys, data_json, event_place(tenant, run_id, row["seq"]))
        data = json.loads(data_json)
        undecodable = not isinstance(data, dict)
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
    if _is_sealed(spec) or _is_sealed(details):
        tenant, run_id, step = row["tenant"], row["run_id"], row["step"]
        spec = _opened(keys, spec, task_place(tenant, run_id, step, "spec"))
        details = _opened(keys, details, task_place(tenant, run_id, step, "heartbeat_details"))
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


def approval_from_row(row: Row, keys: Keys | None = None) -> ApprovalRecord:
    data = row["data"]
    if _is_sealed(data):
        data = open_text(
            keys, data, approval_place(row["tenant"], row["run_id"], row["approval_id"])
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
