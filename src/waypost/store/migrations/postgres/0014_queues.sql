-- waypost schema, version 14 (PostgreSQL): named queues. An activity names the queue its
-- tasks wait in (`named_queue`, 'default' when it names none); a tenant's `queues` row holds
-- that queue's limits: at most `concurrency` attempts leased at once (counted in the claim,
-- which locks the row first) and at most `rate_count` starts per `rate_period` seconds (a
-- token bucket kept in the row, so every engine draws from the same one).

ALTER TABLE tasks ADD COLUMN named_queue text NOT NULL DEFAULT 'default';
-- A run's concurrency key (at most a queue's `key_concurrency` of its attempts at once
-- per key), copied to its activity tasks as the priority is.
ALTER TABLE runs ADD COLUMN concurrency_key text;
ALTER TABLE runs ADD COLUMN dedup_id text;
-- A start with a deduplication id finds the run not yet finished that has it: at most
-- one such run per (tenant, id), so of concurrent starts one creates it.
CREATE UNIQUE INDEX runs_by_dedup_id ON runs (tenant, dedup_id)
    WHERE dedup_id IS NOT NULL AND status IN ('running', 'waiting', 'paused', 'suspended');
ALTER TABLE tasks ADD COLUMN concurrency_key text;

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
    PRIMARY KEY (tenant, name)
);
