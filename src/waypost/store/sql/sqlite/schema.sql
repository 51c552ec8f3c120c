-- waypost schema (SQLite): the result of applying every migration in order.
-- Times are seconds since the epoch (REAL). JSON is stored as TEXT.

CREATE TABLE runs (
    tenant        TEXT    NOT NULL,
    run_id        TEXT    NOT NULL,
    workflow      TEXT    NOT NULL,
    version       TEXT    NOT NULL,
    status        TEXT    NOT NULL,
    input         TEXT    NOT NULL,
    result        TEXT,
    error         TEXT,
    waiting_for   TEXT    NOT NULL DEFAULT '[]',
    last_seq      INTEGER NOT NULL,
    last_hash     TEXT    NOT NULL,
    processed_seq INTEGER NOT NULL DEFAULT 0,
    created_at    REAL    NOT NULL,
    updated_at    REAL    NOT NULL,
    finished_at   REAL,
    PRIMARY KEY (tenant, run_id)
) WITHOUT ROWID;

CREATE INDEX runs_by_status ON runs (tenant, status, created_at);

CREATE TABLE events (
    tenant TEXT    NOT NULL,
    run_id TEXT    NOT NULL,
    seq    INTEGER NOT NULL,
    type   TEXT    NOT NULL,
    data   TEXT    NOT NULL,
    ts     REAL    NOT NULL,
    hash   TEXT    NOT NULL,
    PRIMARY KEY (tenant, run_id, seq)
) WITHOUT ROWID;

-- One workflow task per live run (step = ''), one activity task per open step.
-- state: 'ready' (claimable at visible_at), 'leased' (owner holds it until
-- visible_at), 'idle' (workflow task with nothing to do until an event wakes it).
CREATE TABLE tasks (
    tenant            TEXT    NOT NULL,
    run_id            TEXT    NOT NULL,
    kind              TEXT    NOT NULL,
    step              TEXT    NOT NULL,
    queue             TEXT    NOT NULL,
    state             TEXT    NOT NULL,
    visible_at        REAL,
    owner             TEXT,
    fence             INTEGER NOT NULL DEFAULT 0,
    attempt           INTEGER NOT NULL DEFAULT 0,
    started_at        REAL,
    deadline          REAL,
    heartbeat_deadline REAL,
    timeout           REAL,
    heartbeat_timeout REAL,
    heartbeat_details TEXT,
    cancel_requested  INTEGER NOT NULL DEFAULT 0,
    spec              TEXT,
    created_at        REAL    NOT NULL,
    PRIMARY KEY (tenant, run_id, kind, step)
) WITHOUT ROWID;

CREATE INDEX tasks_due ON tasks (kind, state, visible_at);

-- A timer fires once per generation: firing is a conditional update on
-- (status, generation), so two schedulers cannot both fire it.
CREATE TABLE timers (
    tenant     TEXT    NOT NULL,
    run_id     TEXT    NOT NULL,
    step       TEXT    NOT NULL,
    fire_at    REAL    NOT NULL,
    generation INTEGER NOT NULL DEFAULT 1,
    status     TEXT    NOT NULL,
    PRIMARY KEY (tenant, run_id, step)
) WITHOUT ROWID;

CREATE INDEX timers_due ON timers (status, fire_at);

CREATE TABLE workers (
    worker_id    TEXT PRIMARY KEY,
    host         TEXT NOT NULL,
    pid          INTEGER NOT NULL,
    queues       TEXT NOT NULL,
    started_at   REAL NOT NULL,
    heartbeat_at REAL NOT NULL
) WITHOUT ROWID;

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
