-- waypost schema (PostgreSQL): the result of applying every migration in order.
-- Times are seconds since the epoch (double precision). JSON is stored as text,
-- byte for byte as hashed into the history's chain.

CREATE TABLE runs (
    tenant        text             NOT NULL,
    run_id        text             NOT NULL,
    workflow      text             NOT NULL,
    version       text             NOT NULL,
    status        text             NOT NULL,
    input         text             NOT NULL,
    result        text,
    error         text,
    waiting_for   text             NOT NULL DEFAULT '[]',
    last_seq      bigint           NOT NULL,
    last_hash     text             NOT NULL,
    processed_seq bigint           NOT NULL DEFAULT 0,
    created_at    double precision NOT NULL,
    updated_at    double precision NOT NULL,
    finished_at   double precision,
    priority      integer          NOT NULL DEFAULT 0,
    parent_run_id text,
    parent_step   text,
    parent_close  text,
    parent_told   integer          NOT NULL DEFAULT 0,
    concurrency_key text,
    dedup_id      text,
    named_queue   text,
    input_mac     text,
    state_mac     text,
    -- Bounds: bytes of JSON of the history, signals received and not taken in by the
    -- code (buffered), and the signal names the code takes in now (JSON; NULL: unknown).
    history_bytes bigint           NOT NULL DEFAULT 0,
    unread_signals integer         NOT NULL DEFAULT 0,
    signal_names  text,
    PRIMARY KEY (tenant, run_id)
);

-- A start with a deduplication id finds the run not yet finished that has it: at most
-- one such run per (tenant, id), so of concurrent starts one creates it.
CREATE UNIQUE INDEX runs_by_dedup_id ON runs (tenant, dedup_id)
    WHERE dedup_id IS NOT NULL
      AND status IN ('enqueued', 'running', 'waiting', 'paused', 'suspended');
-- A workflow queue's runs: those admitted (counted) and those enqueued (by priority, then
-- oldest first).
CREATE INDEX runs_by_named_queue ON runs (tenant, named_queue, status, priority, created_at)
    WHERE named_queue IS NOT NULL;
-- The scheduler's pass finds the queues with enqueued runs, across tenants, in this one.
CREATE INDEX runs_enqueued ON runs (tenant, named_queue) WHERE status = 'enqueued';

-- Pages of runs, newest first: a keyset on (created_at, run_id) within the tenant,
-- alone or with one filter.
CREATE INDEX runs_by_created ON runs (tenant, created_at, run_id);
CREATE INDEX runs_by_status ON runs (tenant, status, created_at, run_id);
CREATE INDEX runs_by_workflow ON runs (tenant, workflow, created_at, run_id);
-- A parent's children (child runs, migration 14).
CREATE INDEX runs_by_parent ON runs (tenant, parent_run_id);

CREATE TABLE events (
    tenant text             NOT NULL,
    run_id text             NOT NULL,
    seq    bigint           NOT NULL,
    type   text             NOT NULL,
    data   text             NOT NULL,
    ts     double precision NOT NULL,
    hash   text             NOT NULL,
    PRIMARY KEY (tenant, run_id, seq)
);

-- One workflow task per live run (step = ''), one activity task per open step.
-- state: 'ready' (claimable at visible_at), 'leased' (owner holds it until
-- visible_at), 'idle' (workflow task with nothing to do until an event wakes it).
CREATE TABLE tasks (
    tenant             text             NOT NULL,
    run_id             text             NOT NULL,
    kind               text             NOT NULL,
    step               text             NOT NULL,
    queue              text             NOT NULL,
    state              text             NOT NULL,
    visible_at         double precision,
    owner              text,
    fence              bigint           NOT NULL DEFAULT 0,
    attempt            integer          NOT NULL DEFAULT 0,
    started_at         double precision,
    deadline           double precision,
    heartbeat_deadline double precision,
    timeout            double precision,
    heartbeat_timeout  double precision,
    heartbeat_details  text,
    cancel_requested   boolean          NOT NULL DEFAULT false,
    spec               text,
    created_at         double precision NOT NULL,
    priority           integer          NOT NULL DEFAULT 0,
    lapses             integer          NOT NULL DEFAULT 0,
    named_queue        text             NOT NULL DEFAULT 'default',
    concurrency_key    text,
    PRIMARY KEY (tenant, run_id, kind, step)
);

CREATE INDEX tasks_due ON tasks (kind, state, visible_at);

-- Claims go tenant by tenant (a tenant's backlog never hides another tenant's work),
-- then by priority, then oldest first.
CREATE INDEX tasks_ready ON tasks (kind, tenant, priority DESC, visible_at) WHERE state = 'ready';
-- What a tenant has in flight, counted against its quota.
CREATE INDEX tasks_leased ON tasks (tenant, kind) WHERE state = 'leased';

-- A timer fires once per generation: firing is a conditional update on
-- (status, generation), so two schedulers cannot both fire it.
CREATE TABLE timers (
    tenant     text             NOT NULL,
    run_id     text             NOT NULL,
    step       text             NOT NULL,
    fire_at    double precision NOT NULL,
    generation integer          NOT NULL DEFAULT 1,
    status     text             NOT NULL,
    PRIMARY KEY (tenant, run_id, step)
);

CREATE INDEX timers_due ON timers (status, fire_at);
CREATE INDEX timers_by_tenant ON timers (tenant, status);

CREATE TABLE workers (
    worker_id    text             PRIMARY KEY,
    host         text             NOT NULL,
    pid          integer          NOT NULL,
    queues       text             NOT NULL,
    started_at   double precision NOT NULL,
    heartbeat_at double precision NOT NULL
);

CREATE TABLE approvals (
    tenant      text NOT NULL,
    approval_id text NOT NULL,
    run_id      text NOT NULL,
    step        text NOT NULL,
    timer_step  text,
    name        text NOT NULL,
    policy      text NOT NULL,
    status      text NOT NULL,
    started_by  text,
    data        text NOT NULL DEFAULT 'null',
    expires_at  double precision,
    created_at  double precision NOT NULL,
    closed_at   double precision,
    mac         text,
    PRIMARY KEY (tenant, approval_id)
);

CREATE INDEX approvals_by_run ON approvals (tenant, run_id);
CREATE INDEX approvals_by_status ON approvals (tenant, status, created_at);

CREATE TABLE approval_credentials (
    tenant        text NOT NULL,
    credential_id text NOT NULL,
    approval_id   text NOT NULL,
    approver      text NOT NULL,
    action        text NOT NULL,
    secret_hash   text NOT NULL,
    status        text NOT NULL,
    expires_at    double precision,
    created_at    double precision NOT NULL,
    used_at       double precision,
    PRIMARY KEY (tenant, credential_id)
);

CREATE INDEX approval_credentials_by_approval ON approval_credentials (tenant, approval_id, approver);
CREATE UNIQUE INDEX approval_credentials_by_id ON approval_credentials (credential_id);

CREATE TABLE approval_votes (
    tenant        text NOT NULL,
    approval_id   text NOT NULL,
    principal     text NOT NULL,
    decision      text NOT NULL,
    comment       text NOT NULL DEFAULT '',
    credential_id text NOT NULL,
    at            double precision NOT NULL,
    auth          text NOT NULL DEFAULT '',
    authenticated_by text NOT NULL DEFAULT '',
    PRIMARY KEY (tenant, approval_id, principal)
);

-- Refused decisions: each distinct (principal, reason) of an approval once, with a count,
-- up to a limit per approval; the rest counted in the overflow row (principal and reason '').
CREATE TABLE approval_refusals (
    tenant        text NOT NULL,
    approval_id   text NOT NULL,
    principal     text NOT NULL,
    reason        text NOT NULL,
    decision      text NOT NULL,
    credential_id text,
    auth          text NOT NULL,
    attempts      bigint NOT NULL,
    first_at      double precision NOT NULL,
    last_at       double precision NOT NULL,
    authenticated_by text NOT NULL DEFAULT '',
    PRIMARY KEY (tenant, approval_id, principal, reason)
);

CREATE TABLE group_members (
    tenant     text NOT NULL,
    group_name text NOT NULL,
    principal  text NOT NULL,
    added_at   double precision NOT NULL,
    PRIMARY KEY (tenant, group_name, principal)
);

CREATE TABLE outbox (
    id         text PRIMARY KEY,
    tenant     text NOT NULL,
    kind       text NOT NULL,
    payload    text NOT NULL,
    status     text NOT NULL,
    attempts   integer NOT NULL DEFAULT 0,
    visible_at double precision NOT NULL,
    owner      text,
    last_error text,
    created_at double precision NOT NULL,
    sent_at    double precision
);

CREATE INDEX outbox_due ON outbox (status, visible_at);

-- Workflows defined as data: immutable versions, identified by their content's digest.
CREATE TABLE definitions (
    tenant       text NOT NULL,
    name         text NOT NULL,
    version      integer NOT NULL,
    digest       text NOT NULL,
    body         text NOT NULL,
    source       text NOT NULL,
    published_at double precision NOT NULL,
    published_by text,
    PRIMARY KEY (tenant, name, version)
);

CREATE UNIQUE INDEX definitions_by_digest ON definitions (tenant, name, digest);

-- Tenants and their API keys: a key is looked up by its public key_id; only the
-- SHA-256 of its secret is kept. Quotas are JSON.
CREATE TABLE tenants (
    tenant     text PRIMARY KEY,
    created_at double precision NOT NULL,
    created_by text NOT NULL,
    quotas     text NOT NULL DEFAULT '{}',
    disabled_at double precision,
    disabled_by text
);

CREATE TABLE api_keys (
    key_id       text PRIMARY KEY,
    tenant       text NOT NULL,
    principal    text NOT NULL,
    roles        text NOT NULL,
    secret_hash  text NOT NULL,
    created_at   double precision NOT NULL,
    created_by   text NOT NULL,
    expires_at   double precision,
    revoked_at   double precision,
    revoked_by   text,
    last_used_at double precision
);

CREATE INDEX api_keys_by_tenant ON api_keys (tenant, created_at);

-- Signal waits findable by correlation, and the webhook sources that deliver to them.
--
-- correlations: one row per open `wait_signal(..., correlate=(key, value))`, written by
-- the commit that records CorrelationRegistered and deleted by the one that records
-- CorrelationWithdrawn (or ends the run). Several runs may wait with one (key, value).
CREATE TABLE correlations (
    tenant     text             NOT NULL,
    run_id     text             NOT NULL,
    step       text             NOT NULL,
    signal     text             NOT NULL,
    corr_key   text             NOT NULL,
    corr_value text             NOT NULL,
    created_at double precision NOT NULL,
    PRIMARY KEY (tenant, run_id, step)
);

CREATE INDEX correlations_by_value ON correlations (tenant, corr_key, corr_value, signal, created_at);

-- webhook_sources: a tenant's sources by their ids; a delivery's URL names the source by
-- its `url_id` (random, unique across tenants; a source made before version 18 kept its
-- id), which is how its tenant is learnt. The secret is sealed like payloads when the
-- store has encryption keys: checking an HMAC needs the secret itself, not a hash.
CREATE TABLE webhook_sources (
    tenant     text             NOT NULL,
    source     text             NOT NULL,
    url_id     text             NOT NULL,
    signal     text             NOT NULL,
    corr_key   text             NOT NULL,
    corr_path  text             NOT NULL,
    tolerance  integer          NOT NULL,
    secret     text             NOT NULL,
    created_at double precision NOT NULL,
    created_by text             NOT NULL,
    PRIMARY KEY (tenant, source)
);

CREATE UNIQUE INDEX webhook_sources_by_url_id ON webhook_sources (url_id);

-- webhook_deliveries: the delivery ids a source has delivered, with what the first
-- delivery answered, kept for twice the source's tolerance (a replay older than that
-- is refused by its timestamp).
CREATE TABLE webhook_deliveries (
    tenant      text             NOT NULL,
    source      text             NOT NULL,
    delivery_id text             NOT NULL,
    received_at double precision NOT NULL,
    outcome     text,
    PRIMARY KEY (tenant, source, delivery_id)
);

CREATE INDEX webhook_deliveries_by_age ON webhook_deliveries (tenant, source, received_at);

-- A tenant's start-rate bucket (tokens as of refilled_at); its row is what the
-- tenant's admissions lock, so that concurrent starts count one after another.
CREATE TABLE tenant_admission (
    tenant      text PRIMARY KEY,
    tokens      double precision NOT NULL,
    refilled_at double precision NOT NULL
);

-- Retention: finished runs found by age, and the summaries purged runs leave.
CREATE INDEX runs_by_finished ON runs (tenant, finished_at) WHERE finished_at IS NOT NULL;

CREATE TABLE purged_runs (
    tenant      text             NOT NULL,
    run_id      text             NOT NULL,
    workflow    text             NOT NULL,
    version     text             NOT NULL,
    status      text             NOT NULL,
    created_at  double precision NOT NULL,
    finished_at double precision,
    last_seq    bigint           NOT NULL,
    last_hash   text             NOT NULL,
    purged_at   double precision NOT NULL,
    purged_by   text             NOT NULL,
    reason      text             NOT NULL DEFAULT '',
    PRIMARY KEY (tenant, run_id)
);

CREATE INDEX purged_runs_by_time ON purged_runs (tenant, purged_at, run_id);

-- Console users (their argon2id password hashes) and sessions (the SHA-256 of their tokens).

CREATE TABLE users (
    tenant              text NOT NULL,
    name                text NOT NULL,
    roles               text NOT NULL,
    password_hash       text NOT NULL,
    created_at          double precision NOT NULL,
    created_by          text NOT NULL,
    disabled_at         double precision,
    disabled_by         text,
    password_changed_at double precision,
    failed_sign_ins     integer NOT NULL DEFAULT 0,
    locked_until        double precision,
    PRIMARY KEY (tenant, name)
);

CREATE TABLE console_sessions (
    token_hash  text PRIMARY KEY,
    tenant      text NOT NULL,
    subject     text NOT NULL,
    kind        text NOT NULL,
    credential  text NOT NULL,
    created_at  double precision NOT NULL,
    expires_at  double precision NOT NULL,
    ended_at    double precision
);

CREATE INDEX console_sessions_by_credential ON console_sessions (tenant, kind, credential);
CREATE INDEX console_sessions_by_expiry ON console_sessions (expires_at);

CREATE TABLE schedules (
    tenant           text NOT NULL,
    schedule_id      text NOT NULL,
    workflow         text NOT NULL,
    version          text,
    cron             text,
    tz               text NOT NULL,
    every            double precision,
    input            text NOT NULL,
    overlap          text NOT NULL,
    catchup          text NOT NULL,
    catchup_window   double precision NOT NULL,
    paused           integer NOT NULL DEFAULT 0,
    next_fire_at     double precision,
    last_fire_at     double precision,
    last_run_id      text,
    buffered_fire_at double precision,
    created_at       double precision NOT NULL,
    created_by       text NOT NULL,
    changed_at       double precision,
    changed_by       text,
    PRIMARY KEY (tenant, schedule_id)
);

CREATE INDEX schedules_due ON schedules (next_fire_at) WHERE paused = 0;

-- Named queues: an activity's tasks wait in one; its limits are the tenant's row.
CREATE INDEX tasks_by_named_queue ON tasks (tenant, named_queue, state) WHERE kind = 'activity';

CREATE TABLE queues (
    tenant      text             NOT NULL,
    name        text             NOT NULL,
    concurrency integer,
    key_concurrency integer,
    rate_count  integer,
    rate_period double precision,
    tokens      double precision NOT NULL,
    refilled_at double precision NOT NULL,
    updated_at  double precision NOT NULL,
    updated_by  text             NOT NULL,
    worker_concurrency integer,
    PRIMARY KEY (tenant, name)
);

-- Sign-in attempts, counted before a password is checked (migration 19): per address
-- (tenant and user_name ''), per user at an address, per user from everywhere (address '').
CREATE TABLE sign_in_attempts (
    tenant       text             NOT NULL,
    user_name    text             NOT NULL,
    address      text             NOT NULL,
    failures     integer          NOT NULL DEFAULT 0,
    window_start double precision NOT NULL,
    held_until   double precision,
    updated_at   double precision NOT NULL,
    PRIMARY KEY (tenant, user_name, address)
);

CREATE INDEX sign_in_attempts_by_age ON sign_in_attempts (updated_at);
