-- waypost schema, version 3 (SQLite): refused decisions on approvals. Each distinct
-- (principal, reason) of an approval is one row with a count, up to a limit per approval;
-- refusals beyond it are counted in the approval's overflow row (principal and reason '').

CREATE TABLE approval_refusals (
    tenant        TEXT NOT NULL,
    approval_id   TEXT NOT NULL,
    principal     TEXT NOT NULL,
    reason        TEXT NOT NULL,
    decision      TEXT NOT NULL,
    credential_id TEXT,
    auth          TEXT NOT NULL,
    attempts      INTEGER NOT NULL,
    first_at      REAL NOT NULL,
    last_at       REAL NOT NULL,
    PRIMARY KEY (tenant, approval_id, principal, reason)
) WITHOUT ROWID;
