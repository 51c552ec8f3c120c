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
    PRIMARY KEY (tenant, run_id)
);

CREATE INDEX runs_by_status ON runs (tenant, status, created_at);

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
    PRIMARY KEY (tenant, run_id, kind, step)
);

CREATE INDEX tasks_due ON tasks (kind, state, visible_at);

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

CREATE TABLE approval_votes (
    tenant        text NOT NULL,
    approval_id   text NOT NULL,
    principal     text NOT NULL,
    decision      text NOT NULL,
    comment       text NOT NULL DEFAULT '',
    credential_id text NOT NULL,
    at            double precision NOT NULL,
    PRIMARY KEY (tenant, approval_id, principal)
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

-- Claims take due tasks in visible_at order; with a large backlog this index lets
-- the claim stop at its limit instead of sorting every claimable row.
CREATE INDEX tasks_claimable ON tasks (kind, visible_at) WHERE state IN ('ready', 'leased');

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
