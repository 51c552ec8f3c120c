"""The checks a run's row and an approval's row carry, under the chain key (decision 0030).

The history is hash-chained, but what callers read first is beside it: a run's row
(`result()` and `GET /v1/runs/{id}` answer its status, input, result and error) and an
approval's row (the approval page shows its data and policy). Each such row carries a
MAC over those columns, its kind, its tenant and its run (`Chain.mac`: HMAC-SHA256 under
the chain key, plain SHA-256 without one), written by every statement that writes the
columns and checked by the row converters of `records.py` on every read, so someone
who can write the database but has no key can neither edit them nor copy them from
another run unnoticed. Two checks per run row, because two kinds of statements write
it: `input_mac` (workflow and input: written when the run or a generation starts) and
`state_mac` (status, result and error: every snapshot). Checks are over the plaintext,
so re-encryption leaves them as they are. A row written before rows were checked has
none (NULL): accepted only where the chain accepts legacy rows.
"""

from __future__ import annotations

from typing import Any

from waypost.model.chain import Chain

from ..tx import Row


def input_mac(chain: Chain, tenant: str, run_id: str, workflow: str, input_json: str) -> str:
    """The check of a run's workflow and input (its JSON text)."""
    return chain.mac("run-input", (tenant, run_id, workflow, input_json))


def state_mac(
    chain: Chain,
    tenant: str,
    run_id: str,
    status: str,
    result_json: str | None,
    error_json: str | None,
) -> str:
    """The check of a run's status, result and error (their JSON texts, or None)."""
    return chain.mac("run-state", (tenant, run_id, status, result_json, error_json))


def run_row_problems(
    chain: Chain, row: Row, input_json: str, result_json: str | None, error_json: str | None
) -> list[str]:
    """Why the run's row (its payloads opened: `input_json`, ...) fails its checks."""
    tenant, run_id = row["tenant"], row["run_id"]
    problems = []
    why = chain.check_mac(
        row["input_mac"], "run-input", (tenant, run_id, row["workflow"], input_json)
    )
    if why is not None:
        problems.append(f"its workflow and input (runs.workflow, runs.input) {why}")
    why = chain.check_mac(
        row["state_mac"], "run-state", (tenant, run_id, row["status"], result_json, error_json)
    )
    if why is not None:
        problems.append(f"its status, result and error (runs.status, result, error) {why}")
    return problems


def approval_mac(chain: Chain, row: Row | dict[str, Any], data_json: str | None) -> str:
    """The check of an approval's row: what it asks (its run, step, name, data, policy,
    starter, expiry). `row` has the columns (an insert's parameters will do);
    `data_json` is its data's plaintext."""
    return chain.mac("approval", _parts(row, data_json))


def approval_row_problem(chain: Chain, row: Row, data_json: str | None) -> str | None:
    """Why the approval's row (its data opened: `data_json`) fails its check, or None."""
    why = chain.check_mac(row["mac"], "approval", _parts(row, data_json))
    if why is None:
        return None
    return f"its data, policy and what it asks (approvals.data, policy, ...) {why}"


def _parts(row: Row | dict[str, Any], data_json: str | None) -> tuple[str | None, ...]:
    # A time is a float in both databases; repr() of the same float is the same text.
    expires_at = row["expires_at"]
    return (
        row["tenant"],
        row["approval_id"],
        row["run_id"],
        row["step"],
        row["timer_step"],
        row["name"],
        row["policy"],
        row["started_by"],
        data_json,
        None if expires_at is None else repr(float(expires_at)),
    )
