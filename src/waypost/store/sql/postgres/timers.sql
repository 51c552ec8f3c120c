-- A batch of due timers fired in two statements (PostgreSQL only; see
-- store/transactions/timers.py), whatever the batch's size: `claim_due_timers` takes the
-- timers and locks and reads their runs, the events are numbered and hashed in the
-- process (the chain's key never reaches the database), `fire_timers` writes them all.

-- name: claim_due_timers
-- Mark at most %(limit)s due timers fired, earliest first, with their runs' heads and
-- workflow tasks locked; return them with those rows as locked. A timer whose row, run
-- or workflow task another transaction holds is skipped, not waited for (a later batch
-- fires it): nothing here waits for a lock, so a batch never deadlocks with a run's last
-- step, which holds the run and deletes its timers. A timer of a run that is gone or has
-- no workflow task is returned without the run's columns (the caller fires it the long
-- way).
WITH due AS (
    SELECT tenant, run_id, step FROM timers
    WHERE status = 'pending' AND fire_at <= %(now)s
      AND NOT EXISTS (SELECT 1 FROM tenants d WHERE d.tenant = timers.tenant AND d.disabled_at IS NOT NULL)
    ORDER BY fire_at LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), head AS (
    SELECT tenant, run_id, last_seq, last_hash, status FROM runs
    WHERE (tenant, run_id) IN (SELECT tenant, run_id FROM due)
    FOR UPDATE SKIP LOCKED
), wt AS (
    SELECT tenant, run_id, state, visible_at, owner, fence, queue, lapses FROM tasks
    WHERE (tenant, run_id) IN (SELECT tenant, run_id FROM due)
      AND kind = 'workflow' AND step = ''
    FOR UPDATE SKIP LOCKED
), fired AS (
    UPDATE timers AS t SET status = 'fired'
    FROM due
    WHERE t.tenant = due.tenant AND t.run_id = due.run_id AND t.step = due.step
      AND ((EXISTS (SELECT 1 FROM head WHERE head.tenant = t.tenant AND head.run_id = t.run_id)
            AND EXISTS (SELECT 1 FROM wt WHERE wt.tenant = t.tenant AND wt.run_id = t.run_id))
           OR NOT EXISTS (SELECT 1 FROM runs r WHERE r.tenant = t.tenant AND r.run_id = t.run_id)
           OR NOT EXISTS (SELECT 1 FROM tasks w
                          WHERE w.tenant = t.tenant AND w.run_id = t.run_id
                            AND w.kind = 'workflow' AND w.step = ''))
    RETURNING t.tenant, t.run_id, t.step, t.generation, t.fire_at
)
SELECT fired.tenant, fired.run_id, fired.step, fired.generation, fired.fire_at,
       head.last_seq, head.last_hash, head.status, wt.state, wt.visible_at, wt.owner,
       wt.fence, wt.queue, wt.lapses
FROM fired
LEFT JOIN head ON head.tenant = fired.tenant AND head.run_id = fired.run_id
LEFT JOIN wt ON wt.tenant = fired.tenant AND wt.run_id = fired.run_id;

-- name: fire_timers
-- The rest of the batch's firing, for the timers `claim_due_timers` returned with their
-- runs: each run's head advanced from the one read, its TimerFired events appended and
-- its workflow task woken or leased. The heads and tasks come as one array per column,
-- each row then found by its primary key, all of whose columns the join names (a JSON
-- parameter is taken for 100 rows, and a join on part of the key, with no statistics,
-- scanned a whole table). The events come as JSON.
-- The rows it changes are locked by `claim_due_timers`, so every head is still where it
-- was read (the counts returned say so, and the caller checks them).
WITH heads AS (
    UPDATE runs AS r SET last_seq = h.last_seq, last_hash = h.last_hash, updated_at = %(now)s,
                         history_bytes = r.history_bytes + h.added_bytes
    FROM unnest(%(head_tenant)s::text[], %(head_run_id)s::text[], %(expect_seq)s::bigint[],
                %(expect_hash)s::text[], %(last_seq)s::bigint[], %(last_hash)s::text[],
                %(added_bytes)s::bigint[])
         AS h(tenant, run_id, expect_seq, expect_hash, last_seq, last_hash, added_bytes)
    WHERE r.tenant = h.tenant AND r.run_id = h.run_id
      AND r.last_seq = h.expect_seq AND r.last_hash = h.expect_hash
    RETURNING 1
), ev AS (
    INSERT INTO events (tenant, run_id, seq, type, data, ts, hash)
    SELECT e.tenant, e.run_id, e.seq, e.type, e.data, e.ts, e.hash
    FROM json_to_recordset(%(events)s::json)
         AS e(tenant text, run_id text, seq bigint, type text, data text,
              ts double precision, hash text)
    RETURNING 1
), woken AS (
    UPDATE tasks AS w SET state = k.state, visible_at = k.visible_at, owner = k.owner,
                          fence = k.fence, lapses = k.lapses
    FROM unnest(%(task_tenant)s::text[], %(task_run_id)s::text[], %(kind)s::text[],
                %(step)s::text[], %(state)s::text[], %(visible_at)s::double precision[],
                %(owner)s::text[], %(fence)s::bigint[], %(lapses)s::integer[])
         AS k(tenant, run_id, kind, step, state, visible_at, owner, fence, lapses)
    WHERE w.tenant = k.tenant AND w.run_id = k.run_id AND w.kind = k.kind AND w.step = k.step
      AND k.kind = 'workflow' AND k.step = ''
    RETURNING 1
)
SELECT (SELECT count(*) FROM heads) AS advanced,
       (SELECT count(*) FROM ev) AS appended,
       (SELECT count(*) FROM woken) AS woken;
