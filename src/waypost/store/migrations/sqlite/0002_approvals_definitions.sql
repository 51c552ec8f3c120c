-- waypost schema, version 2 (SQLite): human approvals (credentials, votes), the built-in
-- directory of groups, the notification outbox, published definitions.

CREATE TABLE approvals (
    tenant      TEXT NOT NULL,
    approval_id TEXT NOT NULL,
    run_id      TEXT NOT NULL,
    step        TEXT NOT NULL,
    timer_step  TEXT,
    name        TEXT NOT NULL,
    policy      TEXT NOT NULL,
    status      TEXT NOT NULL,
    started_by  TEXT,
    data        TEXT NOT NULL DEFAULT 'null',
    expires_at  REAL,
    created_at  REAL NOT NULL,
    closed_at   REAL,
    PRIMARY KEY (tenant, approval_id)
) WITHOUT ROWID;

CREATE INDEX approvals_by_run ON approvals (tenant, run_id);
CREATE INDEX approvals_by_status ON approvals (tenant, status, created_at);

CREATE TABLE approval_credentials (
    tenant        TEXT NOT NULL,
    credential_id TEXT NOT NULL,
    approval_id   TEXT NOT NULL,
    approver      TEXT NOT NULL,
    action        TEXT NOT NULL,
    secret_hash   TEXT NOT NULL,
    status        TEXT NOT NULL,
    expires_at    REAL,
    created_at    REAL NOT NULL,
    used_at       REAL,
    PRIMARY KEY (tenant, credential_id)
) WITHOUT ROWID;

CREATE INDEX approval_credentials_by_approval ON approval_credentials (tenant, approval_id, approver);

CREATE TABLE approval_votes (
    tenant        TEXT NOT NULL,
    approval_id   TEXT NOT NULL,
    principal     TEXT NOT NULL,
    decision      TEXT NOT NULL,
    comment       TEXT NOT NULL DEFAULT '',
    credential_id TEXT NOT NULL,
    at            REAL NOT NULL,
    PRIMARY KEY (tenant, approval_id, principal)
) WITHOUT ROWID;

CREATE TABLE group_members (
    tenant     TEXT NOT NULL,
    group_name TEXT NOT NULL,
    principal  TEXT NOT NULL,
    added_at   REAL NOT NULL,
    PRIMARY KEY (tenant, group_name, principal)
) WITHOUT ROWID;

CREATE TABLE outbox (
    id         TEXT PRIMARY KEY,
    tenant     TEXT NOT NULL,
    kind       TEXT NOT NULL,
    payload    TEXT NOT NULL,
    status     TEXT NOT NULL,
    attempts   INTEGER NOT NULL DEFAULT 0,
    visible_at REAL NOT NULL,
    owner      TEXT,
    last_error TEXT,
    created_at REAL NOT NULL,
    sent_at    REAL
) WITHOUT ROWID;

CREATE INDEX outbox_due ON outbox (status, visible_at);

-- Workflows defined as data: immutable versions, identified by their content's digest.
CREATE TABLE definitions (
    tenant       TEXT NOT NULL,
    name         TEXT NOT NULL,
    version      INTEGER NOT NULL,
    digest       TEXT NOT NULL,
    body         TEXT NOT NULL,
    source       TEXT NOT NULL,
    published_at REAL NOT NULL,
    published_by TEXT,
    PRIMARY KEY (tenant, name, version)
) WITHOUT ROWID;

CREATE UNIQUE INDEX definitions_by_digest ON definitions (tenant, name, digest);
