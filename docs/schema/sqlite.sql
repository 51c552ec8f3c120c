-- waypost schema (SQLite): what a database has once every migration is applied.
-- Written by scripts/schema from the database itself; do not edit. The migrations
-- (src/waypost/store/migrations/sqlite/) are the source, and say why.

CREATE TABLE api_keys (
    key_id       TEXT PRIMARY KEY,
    tenant       TEXT NOT NULL,
    principal    TEXT NOT NULL,
    roles        TEXT NOT NULL,
    secret_hash  TEXT NOT NULL,
    created_at   REAL NOT NULL,
    created_by   TEXT NOT NULL,
    expires_at   REAL,
    revoked_at   REAL,
    revoked_by   TEXT,
    last_used_at REAL
) WITHOUT ROWID;

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
    last_at       REAL NOT NULL, authenticated_by TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (tenant, approval_id, principal, reason)
) WITHOUT ROWID;

CREATE TABLE approval_votes (
    tenant        TEXT NOT NULL,
    approval_id   TEXT NOT NULL,
    principal     TEXT NOT NULL,
    decision      TEXT NOT NULL,
    comment       TEXT NOT NULL DEFAULT '',
    credential_id TEXT NOT NULL,
    at            REAL NOT NULL, auth TEXT NOT NULL DEFAULT '', authenticated_by TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (tenant, approval_id, principal)
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
    closed_at   REAL, mac TEXT,
    PRIMARY KEY (tenant, approval_id)
) WITHOUT ROWID;

CREATE TABLE console_sessions (
    token_hash  TEXT PRIMARY KEY,
    tenant      TEXT NOT NULL,
    subject     TEXT NOT NULL,
    kind        TEXT NOT NULL,
    credential  TEXT NOT NULL,
    created_at  REAL NOT NULL,
    expires_at  REAL NOT NULL,
    ended_at    REAL
) WITHOUT ROWID;

CREATE TABLE correlations (
    tenant     TEXT             NOT NULL,
    run_id     TEXT             NOT NULL,
    step       TEXT             NOT NULL,
    signal     TEXT             NOT NULL,
    corr_key   TEXT             NOT NULL,
    corr_value TEXT             NOT NULL,
    created_at REAL             NOT NULL,
    PRIMARY KEY (tenant, run_id, step)
) WITHOUT ROWID;

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

CREATE TABLE purged_runs (
    tenant      TEXT    NOT NULL,
    run_id      TEXT    NOT NULL,
    workflow    TEXT    NOT NULL,
    version     TEXT    NOT NULL,
    status      TEXT    NOT NULL,
    created_at  REAL    NOT NULL,
    finished_at REAL,
    last_seq    INTEGER NOT NULL,
    last_hash   TEXT    NOT NULL,
    purged_at   REAL    NOT NULL,
    purged_by   TEXT    NOT NULL,
    reason      TEXT    NOT NULL DEFAULT '',
    PRIMARY KEY (tenant, run_id)
) WITHOUT ROWID;

CREATE TABLE queues (
    tenant      TEXT    NOT NULL,
    name        TEXT    NOT NULL,
    concurrency INTEGER,
    key_concurrency INTEGER,
    rate_count  INTEGER,
    rate_period REAL,
    tokens      REAL    NOT NULL,
    refilled_at REAL    NOT NULL,
    updated_at  REAL    NOT NULL,
    updated_by  TEXT    NOT NULL, worker_concurrency INTEGER,
    PRIMARY KEY (tenant, name)
) WITHOUT ROWID;

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
    finished_at   REAL, priority INTEGER NOT NULL DEFAULT 0, parent_run_id TEXT, parent_step TEXT, parent_close TEXT, parent_told INTEGER NOT NULL DEFAULT 0, concurrency_key TEXT, dedup_id TEXT, named_queue TEXT, input_mac TEXT, state_mac TEXT, history_bytes INTEGER NOT NULL DEFAULT 0, unread_signals INTEGER NOT NULL DEFAULT 0, signal_names TEXT,
    PRIMARY KEY (tenant, run_id)
) WITHOUT ROWID;

CREATE TABLE schedules (
    tenant           TEXT NOT NULL,
    schedule_id      TEXT NOT NULL,
    workflow         TEXT NOT NULL,
    version          TEXT,
    cron             TEXT,
    tz               TEXT NOT NULL,
    every            REAL,
    input            TEXT NOT NULL,
    overlap          TEXT NOT NULL,
    catchup          TEXT NOT NULL,
    catchup_window   REAL NOT NULL,
    paused           INTEGER NOT NULL DEFAULT 0,
    next_fire_at     REAL,
    last_fire_at     REAL,
    last_run_id      TEXT,
    buffered_fire_at REAL,
    created_at       REAL NOT NULL,
    created_by       TEXT NOT NULL, changed_at REAL, changed_by TEXT,
    PRIMARY KEY (tenant, schedule_id)
) WITHOUT ROWID;

CREATE TABLE sign_in_attempts (
    tenant       TEXT    NOT NULL,
    user_name    TEXT    NOT NULL,
    address      TEXT    NOT NULL,
    failures     INTEGER NOT NULL DEFAULT 0,
    window_start REAL    NOT NULL,
    held_until   REAL,
    updated_at   REAL    NOT NULL,
    PRIMARY KEY (tenant, user_name, address)
) WITHOUT ROWID;

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
    created_at        REAL    NOT NULL, priority INTEGER NOT NULL DEFAULT 0, lapses INTEGER NOT NULL DEFAULT 0, named_queue TEXT NOT NULL DEFAULT 'default', concurrency_key TEXT,
    PRIMARY KEY (tenant, run_id, kind, step)
) WITHOUT ROWID;

CREATE TABLE tenant_admission (
    tenant      TEXT PRIMARY KEY,
    tokens      REAL NOT NULL,
    refilled_at REAL NOT NULL
) WITHOUT ROWID;

CREATE TABLE tenants (
    tenant     TEXT PRIMARY KEY,
    created_at REAL NOT NULL,
    created_by TEXT NOT NULL,
    quotas     TEXT NOT NULL DEFAULT '{}'
, disabled_at REAL, disabled_by TEXT) WITHOUT ROWID;

CREATE TABLE timers (
    tenant     TEXT    NOT NULL,
    run_id     TEXT    NOT NULL,
    step       TEXT    NOT NULL,
    fire_at    REAL    NOT NULL,
    generation INTEGER NOT NULL DEFAULT 1,
    status     TEXT    NOT NULL,
    PRIMARY KEY (tenant, run_id, step)
) WITHOUT ROWID;

CREATE TABLE users (
    tenant              TEXT NOT NULL,
    name                TEXT NOT NULL,
    roles               TEXT NOT NULL,
    password_hash       TEXT NOT NULL,
    created_at          REAL NOT NULL,
    created_by          TEXT NOT NULL,
    disabled_at         REAL,
    disabled_by         TEXT,
    password_changed_at REAL,
    failed_sign_ins     INTEGER NOT NULL DEFAULT 0,
    locked_until        REAL,
    PRIMARY KEY (tenant, name)
) WITHOUT ROWID;

CREATE TABLE webhook_deliveries (
    tenant      TEXT             NOT NULL,
    source      TEXT             NOT NULL,
    delivery_id TEXT             NOT NULL,
    received_at REAL             NOT NULL,
    outcome     TEXT,
    PRIMARY KEY (tenant, source, delivery_id)
) WITHOUT ROWID;

CREATE TABLE webhook_sources (
    tenant     TEXT             NOT NULL,
    source     TEXT             NOT NULL,
    url_id     TEXT             NOT NULL,
    signal     TEXT             NOT NULL,
    corr_key   TEXT             NOT NULL,
    corr_path  TEXT             NOT NULL,
    tolerance  INTEGER          NOT NULL,
    secret     TEXT             NOT NULL,
    created_at REAL             NOT NULL,
    created_by TEXT             NOT NULL,
    PRIMARY KEY (tenant, source)
) WITHOUT ROWID;

CREATE TABLE workers (
    worker_id    TEXT PRIMARY KEY,
    host         TEXT NOT NULL,
    pid          INTEGER NOT NULL,
    queues       TEXT NOT NULL,
    started_at   REAL NOT NULL,
    heartbeat_at REAL NOT NULL
) WITHOUT ROWID;

CREATE INDEX api_keys_by_tenant ON api_keys (tenant, created_at);

CREATE INDEX approval_credentials_by_approval ON approval_credentials (tenant, approval_id, approver);

CREATE UNIQUE INDEX approval_credentials_by_id ON approval_credentials (credential_id);

CREATE INDEX approvals_by_run ON approvals (tenant, run_id);

CREATE INDEX approvals_by_status ON approvals (tenant, status, created_at);

CREATE INDEX console_sessions_by_credential ON console_sessions (tenant, kind, credential);

CREATE INDEX console_sessions_by_expiry ON console_sessions (expires_at);

CREATE INDEX correlations_by_value ON correlations (tenant, corr_key, corr_value, signal, created_at);

CREATE UNIQUE INDEX definitions_by_digest ON definitions (tenant, name, digest);

CREATE INDEX outbox_due ON outbox (status, visible_at);

CREATE INDEX purged_runs_by_time ON purged_runs (tenant, purged_at, run_id);

CREATE INDEX runs_by_created ON runs (tenant, created_at, run_id);

CREATE UNIQUE INDEX runs_by_dedup_id ON runs (tenant, dedup_id)
    WHERE dedup_id IS NOT NULL
      AND status IN ('enqueued', 'running', 'waiting', 'paused', 'suspended');

CREATE INDEX runs_by_finished ON runs (tenant, finished_at) WHERE finished_at IS NOT NULL;

CREATE INDEX runs_by_named_queue ON runs (tenant, named_queue, status, priority, created_at)
    WHERE named_queue IS NOT NULL;

CREATE INDEX runs_by_parent ON runs (tenant, parent_run_id);

CREATE INDEX runs_by_status ON runs (tenant, status, created_at, run_id);

CREATE INDEX runs_by_workflow ON runs (tenant, workflow, created_at, run_id);

CREATE INDEX runs_enqueued ON runs (tenant, named_queue) WHERE status = 'enqueued';

CREATE INDEX schedules_due ON schedules (next_fire_at) WHERE paused = 0;

CREATE INDEX sign_in_attempts_by_age ON sign_in_attempts (updated_at);

CREATE INDEX tasks_by_named_queue ON tasks (tenant, named_queue, state) WHERE kind = 'activity';

CREATE INDEX tasks_due ON tasks (kind, state, visible_at);

CREATE INDEX tasks_leased ON tasks (tenant, kind) WHERE state = 'leased';

CREATE INDEX tasks_ready ON tasks (kind, tenant, priority DESC, visible_at) WHERE state = 'ready';

CREATE INDEX timers_by_tenant ON timers (tenant, status);

CREATE INDEX timers_due ON timers (status, fire_at);

CREATE INDEX webhook_deliveries_by_age ON webhook_deliveries (tenant, source, received_at);

CREATE UNIQUE INDEX webhook_sources_by_url_id ON webhook_sources (url_id);
