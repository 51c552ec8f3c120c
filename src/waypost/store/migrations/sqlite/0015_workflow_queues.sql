-- waypost schema, version 15 (SQLite): workflow queues and per-worker limits. A run
-- started on a workflow queue names it (`named_queue`) and is 'enqueued' until the queue's
-- limits admit it (counted in the admitting transaction, the queue's row locked first);
-- a queue's `worker_concurrency` bounds the attempts one engine holds at once.

ALTER TABLE runs ADD COLUMN named_queue TEXT;
ALTER TABLE queues ADD COLUMN worker_concurrency INTEGER;

-- An enqueued run is not finished: a start with its deduplication id finds it.
DROP INDEX runs_by_dedup_id;
CREATE UNIQUE INDEX runs_by_dedup_id ON runs (tenant, dedup_id)
    WHERE dedup_id IS NOT NULL
      AND status IN ('enqueued', 'running', 'waiting', 'paused', 'suspended');

-- A workflow queue's runs: those admitted (counted) and those enqueued (by priority, then
-- oldest first).
CREATE INDEX runs_by_named_queue ON runs (tenant, named_queue, status, priority, created_at)
    WHERE named_queue IS NOT NULL;
-- The scheduler's pass finds the queues with enqueued runs, across tenants, in this one.
CREATE INDEX runs_enqueued ON runs (tenant, named_queue) WHERE status = 'enqueued';
