-- waypost schema, version 2 (PostgreSQL): human approvals (credentials, votes), the built-in
-- directory of groups, the notification outbox, published definitions, and an index for claims.

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
