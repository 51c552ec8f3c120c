-- Queries of the PostgreSQL store that differ from the shared ones (../queries.sql), and
-- shared ones it replaces. Each query starts with "-- name: <name>".
-- Its parts ("-- part: <name>") are what the shared queries name as {name} and write
-- differently for this dialect.
-- Parameters are named as psycopg names them (%(name)s): this file is read as written.
-- Rows a transaction reads and then changes are locked (FOR UPDATE: the part for_update
-- in shared queries); claims skip rows other transactions hold (SKIP LOCKED).

-- part: run_size
-- The bytes of a run's stored payloads (input, result, error): a value kept out of line
-- is measured, not fetched.
octet_length(input) + coalesce(octet_length(result), 0)
       + coalesce(octet_length(error), 0)

-- part: for_update
-- A row a transaction reads and then changes is locked until it ends.
FOR UPDATE

-- part: skip_locked
-- Rows a claim takes are locked; rows another transaction holds are skipped, not waited for.
FOR UPDATE SKIP LOCKED

-- part: least
-- The least of its arguments.
LEAST

-- part: in_run_ids
-- Is one of `run_ids` (a JSON array of run ids).
IN (SELECT jsonb_array_elements_text(%(run_ids)s::jsonb))

-- part: in_queues
-- Is one of `queues` (a JSON array of names).
IN (SELECT jsonb_array_elements_text(%(queues)s::jsonb))

-- name: history_sizes
-- The sizes of a history page's events, read before the events themselves: a page stops
-- before its bytes pass the bound, so a huge history is never read whole.
SELECT seq, octet_length(data) AS size FROM events
WHERE tenant = %(tenant)s AND run_id = %(run_id)s AND seq > %(after_seq)s
ORDER BY seq
LIMIT %(limit)s;

-- name: workflow_task_and_limits
-- `workflow_task` (the row locked) and, in the same round trip, the names of the run's
-- tenant's queues with a limit (what `limited_queues` reads), as a JSON array.
SELECT state, visible_at, owner, fence, queue, lapses,
       (SELECT COALESCE(json_agg(q.name ORDER BY q.name), '[]')::text FROM queues q
        WHERE q.tenant = %(tenant)s
          AND (q.concurrency IS NOT NULL OR q.rate_count IS NOT NULL
               OR q.key_concurrency IS NOT NULL
               OR q.worker_concurrency IS NOT NULL)) AS limited_queues
FROM tasks
WHERE tenant = %(tenant)s AND run_id = %(run_id)s AND kind = 'workflow' AND step = ''
FOR UPDATE OF tasks;

-- name: claim_activity_tasks_of_tenant
UPDATE tasks SET {lease_attempt}
WHERE (tenant, run_id, kind, step) IN (
    SELECT tenant, run_id, kind, step FROM tasks
    WHERE kind = 'activity' AND tenant = %(tenant)s AND state = 'ready' AND visible_at <= %(now)s
      AND queue {in_queues}
      -- one named queue (a limited one, claimed under its row's lock), or all but those
      AND (%(named_queue)s::text IS NULL OR named_queue = %(named_queue)s::text)
      AND named_queue NOT IN (SELECT jsonb_array_elements_text(%(named_out)s::jsonb))
      -- a paused or suspended run starts no new attempt (its row found by the primary key)
      AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.tenant = tasks.tenant
                        AND r.run_id = tasks.run_id
                        AND r.status IN ('paused', 'suspended'))
    ORDER BY priority DESC, visible_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED)
RETURNING {claimed_task};

-- name: renew_lease
UPDATE tasks SET
    heartbeat_deadline = CASE WHEN %(heartbeat_at)s::double precision IS NULL THEN heartbeat_deadline
                              ELSE %(heartbeat_at)s::double precision + heartbeat_timeout END,
    heartbeat_details = coalesce(%(heartbeat_details)s::text, heartbeat_details),
    visible_at = LEAST(%(lease_until)s, coalesce(deadline, %(lease_until)s),
                     coalesce(CASE WHEN %(heartbeat_at)s::double precision IS NULL THEN heartbeat_deadline
                                   ELSE %(heartbeat_at)s::double precision + heartbeat_timeout END, %(lease_until)s))
WHERE tenant = %(tenant)s AND run_id = %(run_id)s AND kind = %(kind)s AND step = %(step)s
  AND fence = %(fence)s AND owner = %(owner)s AND state = 'leased'
RETURNING cancel_requested;

-- == approvals ===================================================================

-- name: clock
-- The database's time, in seconds since the epoch: expiry is judged by it.
SELECT extract(epoch FROM clock_timestamp())::double precision AS now;

-- == the built-in directory =========================================================

-- name: pending_approvals_naming_group
SELECT approval_id, policy, started_by FROM approvals
WHERE tenant = %(tenant)s AND status = 'pending'
  AND (policy::jsonb -> 'groups') @> jsonb_build_array(%(group_name)s::text)
ORDER BY approval_id
FOR UPDATE;

-- == pages of runs: versions, search, counts ===========================================

-- name: search_run_sizes_by_prefix
-- A range of run ids in code point order (COLLATE "C": right under any collation of
-- the database, and read on the primary key where the database's collation is C);
-- substr() decides.
SELECT run_id, created_at, {run_size} AS size
FROM runs
WHERE tenant = %(tenant)s AND run_id COLLATE "C" >= %(text)s AND run_id COLLATE "C" < %(after_prefix)s
  AND substr(run_id, 1, %(length)s) = %(text)s
ORDER BY created_at DESC, run_id DESC
LIMIT %(limit)s;

-- == named queues ======================================================================

-- name: limited_queues
-- These tenants' queues with a limit, by tenant and name (the order their rows are locked in).
SELECT tenant, name FROM queues
WHERE tenant IN (SELECT jsonb_array_elements_text(%(tenants)s::jsonb))
  AND (concurrency IS NOT NULL OR rate_count IS NOT NULL OR key_concurrency IS NOT NULL
       OR worker_concurrency IS NOT NULL)
ORDER BY tenant, name;

-- == workflow queues ===================================================================

-- name: count_workers_serving
-- Live workers that take attempts of a named queue (their heartbeat names it).
SELECT count(*) AS n FROM workers w
WHERE w.heartbeat_at >= %(since)s
  AND EXISTS (SELECT 1 FROM jsonb_array_elements_text(w.queues::jsonb) AS e(value)
              WHERE e.value = %(entry)s);

-- name: renew_plain_leases
-- Many leases at once in one round trip, none with a heartbeat to record: %(refs)s is a
-- JSON array of [tenant, run_id, kind, step, fence]; returns the ones still held.
UPDATE tasks AS t SET
    visible_at = LEAST(%(lease_until)s, coalesce(t.deadline, %(lease_until)s),
                       coalesce(t.heartbeat_deadline, %(lease_until)s))
FROM (SELECT e->>0 AS tenant, e->>1 AS run_id, e->>2 AS kind, e->>3 AS step,
             (e->>4)::bigint AS fence
      FROM jsonb_array_elements(%(refs)s::jsonb) AS e) AS r
WHERE t.tenant = r.tenant AND t.run_id = r.run_id AND t.kind = r.kind AND t.step = r.step
  AND t.fence = r.fence AND t.owner = %(owner)s AND t.state = 'leased'
RETURNING t.tenant, t.run_id, t.kind, t.step, t.fence, t.cancel_requested;

-- name: take_due_timers
-- Mark at most %(limit)s due timers fired, earliest first, in one round trip; returns them.
-- Timers another transaction is firing are skipped, not waited for.
UPDATE timers AS t SET status = 'fired'
FROM (SELECT tenant, run_id, step FROM timers
      WHERE status = 'pending' AND fire_at <= %(now)s
        AND NOT EXISTS (SELECT 1 FROM tenants d WHERE d.tenant = timers.tenant AND d.disabled_at IS NOT NULL)
      ORDER BY fire_at LIMIT %(limit)s
      FOR UPDATE SKIP LOCKED) AS due
WHERE t.tenant = due.tenant AND t.run_id = due.run_id AND t.step = due.step
RETURNING t.tenant, t.run_id, t.step, t.generation, t.fire_at;

-- == identities ==========================================================================
-- What a name is already in a tenant, before a tenant admin makes a credential for it.

-- name: identity_as_approver
-- An approver named in a pending approval's policy (the tenant's pending approvals are
-- found on approvals_by_status).
SELECT approval_id FROM approvals
WHERE tenant = %(tenant)s AND status = 'pending'
  AND (policy::jsonb -> 'users') ? %(name)s
LIMIT 1;
