-- waypost schema, version 14 (SQLite): named queues. An activity names the queue its
-- tasks wait in (`named_queue`, 'default' when it names none); a tenant's `queues` row holds
-- that queue's limits: at most `concurrency` attempts leased at once (counted in the claim)
-- and at most `rate_count` starts per `rate_period` seconds (a token bucket kept in the row,
-- so every engine draws from the same one).

ALTER TABLE tasks ADD COLUMN named_queue TEXT NOT NULL DEFAULT 'default';
-- A run's concurrency key (at most a queue's `key_concurrency` of its attempts at once
-- per key), copied to its activity tasks as the priority is.
ALTER TABLE runs ADD COLUMN concurrency_key TEXT;
ALTER TABLE runs ADD COLUMN dedup_id TEXT;
-- A start with a deduplication id finds the run not yet finished that has it: at most
-- one such run per (tenant, id), so of concurrent starts one creates it.
CREATE UNIQUE INDEX runs_by_dedup_id ON runs (tenant, dedup_id)
    WHERE dedup_id IS NOT NULL AND status IN ('running', 'waiting', 'paused', 'suspended');
ALTER TABLE tasks ADD COLUMN concurrency_key TEXT;

CREATE INDEX tasks_by_named_queue ON tasks (tenant, named_queue, state) WHERE kind = 'activity';

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
    updated_by  TEXT    NOT NULL,
    PRIMARY KEY (tenant, name)
) WITHOUT ROWID;
