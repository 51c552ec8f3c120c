-- waypost schema (PostgreSQL): what a database has once every migration is applied.
-- Written by scripts/schema from the database itself; do not edit. The migrations
-- (src/waypost/store/migrations/postgres/) are the source, and say why.

CREATE TABLE api_keys (
    key_id text NOT NULL,
    tenant text NOT NULL,
    principal text NOT NULL,
    roles text NOT NULL,
    secret_hash text NOT NULL,
    created_at double precision NOT NULL,
    created_by text NOT NULL,
    expires_at double precision,
    revoked_at double precision,
    revoked_by text,
    last_used_at double precision,
    CONSTRAINT api_keys_pkey PRIMARY KEY (key_id)
);

CREATE TABLE approval_credentials (
    tenant text NOT NULL,
    credential_id text NOT NULL,
    approval_id text NOT NULL,
    approver text NOT NULL,
    action text NOT NULL,
    secret_hash text NOT NULL,
    status text NOT NULL,
    expires_at double precision,
    created_at double precision NOT NULL,
    used_at double precision,
    CONSTRAINT approval_credentials_pkey PRIMARY KEY (tenant, credential_id)
);

CREATE TABLE approval_refusals (
    tenant text NOT NULL,
    approval_id text NOT NULL,
    principal text NOT NULL,
    reason text NOT NULL,
    decision text NOT NULL,
    credential_id text,
    auth text NOT NULL,
    attempts bigint NOT NULL,
    first_at double precision NOT NULL,
    last_at double precision NOT NULL,
    authenticated_by text NOT NULL DEFAULT ''::text,
    CONSTRAINT approval_refusals_pkey PRIMARY KEY (tenant, approval_id, principal, reason)
);

CREATE TABLE approval_votes (
    tenant text NOT NULL,
    approval_id text NOT NULL,
    principal text NOT NULL,
    decision text NOT NULL,
    comment text NOT NULL DEFAULT ''::text,
    credential_id text NOT NULL,
    at double precision NOT NULL,
    auth text NOT NULL DEFAULT ''::text,
    authenticated_by text NOT NULL DEFAULT ''::text,
    CONSTRAINT approval_votes_pkey PRIMARY KEY (tenant, approval_id, principal)
);

CREATE TABLE approvals (
    tenant text NOT NULL,
    approval_id text NOT NULL,
    run_id text NOT NULL,
    step text NOT NULL,
    timer_step text,
    name text NOT NULL,
    policy text NOT NULL,
    status text NOT NULL,
    started_by text,
    data text NOT NULL DEFAULT 'null'::text,
    expires_at double precision,
    created_at double precision NOT NULL,
    closed_at double precision,
    mac text,
    CONSTRAINT approvals_pkey PRIMARY KEY (tenant, approval_id)
);

CREATE TABLE console_sessions (
    token_hash text NOT NULL,
    tenant text NOT NULL,
    subject text NOT NULL,
    kind text NOT NULL,
    credential text NOT NULL,
    created_at double precision NOT NULL,
    expires_at double precision NOT NULL,
    ended_at double precision,
    CONSTRAINT console_sessions_pkey PRIMARY KEY (token_hash)
);

CREATE TABLE correlations (
    tenant text NOT NULL,
    run_id text NOT NULL,
    step text NOT NULL,
    signal text NOT NULL,
    corr_key text NOT NULL,
    corr_value text NOT NULL,
    created_at double precision NOT NULL,
    CONSTRAINT correlations_pkey PRIMARY KEY (tenant, run_id, step)
);

CREATE TABLE definitions (
    tenant text NOT NULL,
    name text NOT NULL,
    version integer NOT NULL,
    digest text NOT NULL,
    body text NOT NULL,
    source text NOT NULL,
    published_at double precision NOT NULL,
    published_by text,
    CONSTRAINT definitions_pkey PRIMARY KEY (tenant, name, version)
);

CREATE TABLE events (
    tenant text NOT NULL,
    run_id text NOT NULL,
    seq bigint NOT NULL,
    type text NOT NULL,
    data text NOT NULL,
    ts double precision NOT NULL,
    hash text NOT NULL,
    CONSTRAINT events_pkey PRIMARY KEY (tenant, run_id, seq)
);

CREATE TABLE group_members (
    tenant text NOT NULL,
    group_name text NOT NULL,
    principal text NOT NULL,
    added_at double precision NOT NULL,
    CONSTRAINT group_members_pkey PRIMARY KEY (tenant, group_name, principal)
);

CREATE TABLE outbox (
    id text NOT NULL,
    tenant text NOT NULL,
    kind text NOT NULL,
    payload text NOT NULL,
    status text NOT NULL,
    attempts integer NOT NULL DEFAULT 0,
    visible_at double precision NOT NULL,
    owner text,
    last_error text,
    created_at double precision NOT NULL,
    sent_at double precision,
    CONSTRAINT outbox_pkey PRIMARY KEY (id)
);

CREATE TABLE purged_runs (
    tenant text NOT NULL,
    run_id text NOT NULL,
    workflow text NOT NULL,
    version text NOT NULL,
    status text NOT NULL,
    created_at double precision NOT NULL,
    finished_at double precision,
    last_seq bigint NOT NULL,
    last_hash text NOT NULL,
    purged_at double precision NOT NULL,
    purged_by text NOT NULL,
    reason text NOT NULL DEFAULT ''::text,
    CONSTRAINT purged_runs_pkey PRIMARY KEY (tenant, run_id)
);

CREATE TABLE queues (
    tenant text NOT NULL,
    name text NOT NULL,
    concurrency integer,
    key_concurrency integer,
    rate_count integer,
    rate_period double precision,
    tokens double precision NOT NULL,
    refilled_at double precision NOT NULL,
    updated_at double precision NOT NULL,
    updated_by text NOT NULL,
    worker_concurrency integer,
    CONSTRAINT queues_pkey PRIMARY KEY (tenant, name)
);

CREATE TABLE runs (
    tenant text NOT NULL,
    run_id text NOT NULL,
    workflow text NOT NULL,
    version text NOT NULL,
    status text NOT NULL,
    input text NOT NULL,
    result text,
    error text,
    waiting_for text NOT NULL DEFAULT '[]'::text,
    last_seq bigint NOT NULL,
    last_hash text NOT NULL,
    processed_seq bigint NOT NULL DEFAULT 0,
    created_at double precision NOT NULL,
    updated_at double precision NOT NULL,
    finished_at double precision,
    priority integer NOT NULL DEFAULT 0,
    parent_run_id text,
    parent_step text,
    parent_close text,
    parent_told integer NOT NULL DEFAULT 0,
    concurrency_key text,
    dedup_id text,
    named_queue text,
    input_mac text,
    state_mac text,
    history_bytes bigint NOT NULL DEFAULT 0,
    unread_signals integer NOT NULL DEFAULT 0,
    signal_names text,
    CONSTRAINT runs_pkey PRIMARY KEY (tenant, run_id)
);

CREATE TABLE schedules (
    tenant text NOT NULL,
    schedule_id text NOT NULL,
    workflow text NOT NULL,
    version text,
    cron text,
    tz text NOT NULL,
    every double precision,
    input text NOT NULL,
    overlap text NOT NULL,
    catchup text NOT NULL,
    catchup_window double precision NOT NULL,
    paused integer NOT NULL DEFAULT 0,
    next_fire_at double precision,
    last_fire_at double precision,
    last_run_id text,
    buffered_fire_at double precision,
    created_at double precision NOT NULL,
    created_by text NOT NULL,
    changed_at double precision,
    changed_by text,
    CONSTRAINT schedules_pkey PRIMARY KEY (tenant, schedule_id)
);

CREATE TABLE sign_in_attempts (
    tenant text NOT NULL,
    user_name text NOT NULL,
    address text NOT NULL,
    failures integer NOT NULL DEFAULT 0,
    window_start double precision NOT NULL,
    held_until double precision,
    updated_at double precision NOT NULL,
    CONSTRAINT sign_in_attempts_pkey PRIMARY KEY (tenant, user_name, address)
);

CREATE TABLE tasks (
    tenant text NOT NULL,
    run_id text NOT NULL,
    kind text NOT NULL,
    step text NOT NULL,
    queue text NOT NULL,
    state text NOT NULL,
    visible_at double precision,
    owner text,
    fence bigint NOT NULL DEFAULT 0,
    attempt integer NOT NULL DEFAULT 0,
    started_at double precision,
    deadline double precision,
    heartbeat_deadline double precision,
    timeout double precision,
    heartbeat_timeout double precision,
    heartbeat_details text,
    cancel_requested boolean NOT NULL DEFAULT false,
    spec text,
    created_at double precision NOT NULL,
    priority integer NOT NULL DEFAULT 0,
    lapses integer NOT NULL DEFAULT 0,
    named_queue text NOT NULL DEFAULT 'default'::text,
    concurrency_key text,
    CONSTRAINT tasks_pkey PRIMARY KEY (tenant, run_id, kind, step)
);

CREATE TABLE tenant_admission (
    tenant text NOT NULL,
    tokens double precision NOT NULL,
    refilled_at double precision NOT NULL,
    CONSTRAINT tenant_admission_pkey PRIMARY KEY (tenant)
);

CREATE TABLE tenants (
    tenant text NOT NULL,
    created_at double precision NOT NULL,
    created_by text NOT NULL,
    quotas text NOT NULL DEFAULT '{}'::text,
    disabled_at double precision,
    disabled_by text,
    CONSTRAINT tenants_pkey PRIMARY KEY (tenant)
);

CREATE TABLE timers (
    tenant text NOT NULL,
    run_id text NOT NULL,
    step text NOT NULL,
    fire_at double precision NOT NULL,
    generation integer NOT NULL DEFAULT 1,
    status text NOT NULL,
    CONSTRAINT timers_pkey PRIMARY KEY (tenant, run_id, step)
);

CREATE TABLE users (
    tenant text NOT NULL,
    name text NOT NULL,
    roles text NOT NULL,
    password_hash text NOT NULL,
    created_at double precision NOT NULL,
    created_by text NOT NULL,
    disabled_at double precision,
    disabled_by text,
    password_changed_at double precision,
    failed_sign_ins integer NOT NULL DEFAULT 0,
    locked_until double precision,
    CONSTRAINT users_pkey PRIMARY KEY (tenant, name)
);

CREATE TABLE webhook_deliveries (
    source text NOT NULL,
    delivery_id text NOT NULL,
    tenant text NOT NULL,
    received_at double precision NOT NULL,
    outcome text,
    CONSTRAINT webhook_deliveries_pkey PRIMARY KEY (tenant, source, delivery_id)
);

CREATE TABLE webhook_sources (
    source text NOT NULL,
    tenant text NOT NULL,
    signal text NOT NULL,
    corr_key text NOT NULL,
    corr_path text NOT NULL,
    tolerance integer NOT NULL,
    secret text NOT NULL,
    created_at double precision NOT NULL,
    created_by text NOT NULL,
    url_id text NOT NULL,
    CONSTRAINT webhook_sources_pkey PRIMARY KEY (tenant, source)
);

CREATE TABLE workers (
    worker_id text NOT NULL,
    host text NOT NULL,
    pid integer NOT NULL,
    queues text NOT NULL,
    started_at double precision NOT NULL,
    heartbeat_at double precision NOT NULL,
    CONSTRAINT workers_pkey PRIMARY KEY (worker_id)
);

CREATE INDEX api_keys_by_tenant ON api_keys USING btree (tenant, created_at);

CREATE INDEX approval_credentials_by_approval ON approval_credentials USING btree (tenant, approval_id, approver);

CREATE UNIQUE INDEX approval_credentials_by_id ON approval_credentials USING btree (credential_id);

CREATE INDEX approvals_by_run ON approvals USING btree (tenant, run_id);

CREATE INDEX approvals_by_status ON approvals USING btree (tenant, status, created_at);

CREATE INDEX console_sessions_by_credential ON console_sessions USING btree (tenant, kind, credential);

CREATE INDEX console_sessions_by_expiry ON console_sessions USING btree (expires_at);

CREATE INDEX correlations_by_value ON correlations USING btree (tenant, corr_key, corr_value, signal, created_at);

CREATE UNIQUE INDEX definitions_by_digest ON definitions USING btree (tenant, name, digest);

CREATE INDEX outbox_due ON outbox USING btree (status, visible_at);

CREATE INDEX purged_runs_by_time ON purged_runs USING btree (tenant, purged_at, run_id);

CREATE INDEX runs_by_created ON runs USING btree (tenant, created_at, run_id);

CREATE UNIQUE INDEX runs_by_dedup_id ON runs USING btree (tenant, dedup_id) WHERE ((dedup_id IS NOT NULL) AND (status = ANY (ARRAY['enqueued'::text, 'running'::text, 'waiting'::text, 'paused'::text, 'suspended'::text])));

CREATE INDEX runs_by_finished ON runs USING btree (tenant, finished_at) WHERE (finished_at IS NOT NULL);

CREATE INDEX runs_by_named_queue ON runs USING btree (tenant, named_queue, status, priority, created_at) WHERE (named_queue IS NOT NULL);

CREATE INDEX runs_by_parent ON runs USING btree (tenant, parent_run_id);

CREATE INDEX runs_by_status ON runs USING btree (tenant, status, created_at, run_id);

CREATE INDEX runs_by_workflow ON runs USING btree (tenant, workflow, created_at, run_id);

CREATE INDEX runs_enqueued ON runs USING btree (tenant, named_queue) WHERE (status = 'enqueued'::text);

CREATE INDEX schedules_due ON schedules USING btree (next_fire_at) WHERE (paused = 0);

CREATE INDEX sign_in_attempts_by_age ON sign_in_attempts USING btree (updated_at);

CREATE INDEX tasks_by_named_queue ON tasks USING btree (tenant, named_queue, state) WHERE (kind = 'activity'::text);

CREATE INDEX tasks_due ON tasks USING btree (kind, state, visible_at);

CREATE INDEX tasks_leased ON tasks USING btree (tenant, kind) WHERE (state = 'leased'::text);

CREATE INDEX tasks_ready ON tasks USING btree (kind, tenant, priority DESC, visible_at) WHERE (state = 'ready'::text);

CREATE INDEX timers_by_tenant ON timers USING btree (tenant, status);

CREATE INDEX timers_due ON timers USING btree (status, fire_at);

CREATE INDEX webhook_deliveries_by_age ON webhook_deliveries USING btree (tenant, source, received_at);

CREATE UNIQUE INDEX webhook_sources_by_url_id ON webhook_sources USING btree (url_id);
