-- Queries of the SQLite store that differ from the shared ones (../queries.sql), and
-- shared ones it replaces. Each query starts with "-- name: <name>".
-- Its parts ("-- part: <name>") are what the shared queries name as {name} and write
-- differently for this dialect.
-- Parameters are named (:name).

-- part: run_size
-- The bytes of a run's stored payloads (input, result, error).
length(CAST(input AS BLOB)) + coalesce(length(CAST(result AS BLOB)), 0)
       + coalesce(length(CAST(error AS BLOB)), 0)

-- part: for_update
-- Nothing: SQLite's one writer holds the database for the whole transaction.

-- part: skip_locked
-- Nothing: no other transaction writes while a claim runs (SQLite has one writer).

-- part: least
-- The least of its arguments.
min

-- part: in_run_ids
-- Is one of `run_ids` (a JSON array of run ids).
IN (SELECT value FROM json_each(:run_ids))

-- part: in_queues
-- Is one of `queues` (a JSON array of names).
IN (SELECT value FROM json_each(:queues))

-- name: history_sizes
-- The sizes of a history page's events, read before the events themselves: a page stops
-- before its bytes pass the bound, so a huge history is never read whole.
SELECT seq, length(CAST(data AS BLOB)) AS size FROM events
WHERE tenant = :tenant AND run_id = :run_id AND seq > :after_seq
ORDER BY seq
LIMIT :limit;

-- name: workflow_task_and_limits
-- `workflow_task` and the names of the run's tenant's queues with a limit (what
-- `limited_queues` reads), as a JSON array.
SELECT state, visible_at, owner, fence, queue, lapses,
       (SELECT COALESCE(json_group_array(name), '[]') FROM
          (SELECT q.name FROM queues q
           WHERE q.tenant = :tenant
             AND (q.concurrency IS NOT NULL OR q.rate_count IS NOT NULL
                  OR q.key_concurrency IS NOT NULL
                  OR q.worker_concurrency IS NOT NULL)
           ORDER BY q.name)) AS limited_queues
FROM tasks
WHERE tenant = :tenant AND run_id = :run_id AND kind = 'workflow' AND step = '';

-- name: claim_activity_tasks_of_tenant
UPDATE tasks SET {lease_attempt}
WHERE (tenant, run_id, kind, step) IN (
    SELECT tenant, run_id, kind, step FROM tasks
    WHERE kind = 'activity' AND tenant = :tenant AND state = 'ready' AND visible_at <= :now
      AND queue {in_queues}
      -- one named queue (a limited one, claimed under its row's lock), or all but those
      AND (:named_queue IS NULL OR named_queue = :named_queue)
      AND named_queue NOT IN (SELECT value FROM json_each(:named_out))
      -- a paused or suspended run starts no new attempt (its row found by the primary key)
      AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.tenant = tasks.tenant
                        AND r.run_id = tasks.run_id
                        AND r.status IN ('paused', 'suspended'))
    ORDER BY priority DESC, visible_at
    LIMIT :limit)
RETURNING {claimed_task};

-- name: renew_lease
UPDATE tasks SET
    heartbeat_deadline = CASE WHEN :heartbeat_at IS NULL THEN heartbeat_deadline
                              ELSE :heartbeat_at + heartbeat_timeout END,
    heartbeat_details = coalesce(:heartbeat_details, heartbeat_details),
    visible_at = min(:lease_until, coalesce(deadline, :lease_until),
                     coalesce(CASE WHEN :heartbeat_at IS NULL THEN heartbeat_deadline
                                   ELSE :heartbeat_at + heartbeat_timeout END, :lease_until))
WHERE tenant = :tenant AND run_id = :run_id AND kind = :kind AND step = :step
  AND fence = :fence AND owner = :owner AND state = 'leased'
RETURNING cancel_requested;

-- == approvals ===================================================================

-- name: close_run_approvals
-- (Indexes named here and below: SQLite would otherwise take the primary key's tenant
-- prefix and read every approval or credential of the tenant.)
UPDATE approvals INDEXED BY approvals_by_run SET status = :status, closed_at = :now
WHERE tenant = :tenant AND run_id = :run_id AND status = 'pending';

-- name: retire_approver_credentials
UPDATE approval_credentials INDEXED BY approval_credentials_by_approval SET status = :status, used_at = :now
WHERE tenant = :tenant AND approval_id = :approval_id AND approver = :approver
  AND status = 'active';

-- name: revoke_approval_credentials
UPDATE approval_credentials INDEXED BY approval_credentials_by_approval SET status = 'revoked', used_at = :now
WHERE tenant = :tenant AND approval_id = :approval_id AND status = 'active';

-- name: revoke_run_credentials
UPDATE approval_credentials INDEXED BY approval_credentials_by_approval SET status = 'revoked', used_at = :now
WHERE tenant = :tenant AND status = 'active' AND approval_id IN (
    SELECT approval_id FROM approvals WHERE tenant = :tenant AND run_id = :run_id);

-- name: clock
-- The database's time, in seconds since the epoch: expiry is judged by it.
SELECT (julianday('now') - 2440587.5) * 86400.0 AS now;

-- == the built-in directory =========================================================

-- name: pending_approvals_naming_group
SELECT approval_id, policy, started_by FROM approvals
WHERE tenant = :tenant AND status = 'pending'
  AND EXISTS (SELECT 1 FROM json_each(approvals.policy, '$.groups') AS g
              WHERE g.value = :group_name)
ORDER BY approval_id;

-- == pages of runs: versions, search, counts ===========================================

-- name: search_run_sizes_by_prefix
-- A range of the primary key (tenant, run_id): the ids from the prefix up to the first
-- text after every id that starts with it (code point order, which SQLite's BINARY
-- collation keeps); substr() decides.
SELECT run_id, created_at, {run_size} AS size
FROM runs
WHERE tenant = :tenant AND run_id >= :text AND run_id < :after_prefix
  AND substr(run_id, 1, :length) = :text
ORDER BY created_at DESC, run_id DESC
LIMIT :limit;

-- name: run_children
-- A run's children, oldest first (the index on the parent finds them; named, because
-- SQLite would otherwise walk the tenant's runs in creation order to skip the sort,
-- reading every run of the tenant on each run's end).
SELECT run_id, workflow, version, status, parent_step, parent_close, processed_seq
FROM runs INDEXED BY runs_by_parent
WHERE tenant = :tenant AND parent_run_id = :run_id
ORDER BY created_at, run_id
LIMIT :limit;

-- == named queues ======================================================================

-- name: limited_queues
-- These tenants' queues with a limit, by tenant and name (the order their rows are locked in).
SELECT tenant, name FROM queues
WHERE tenant IN (SELECT value FROM json_each(:tenants))
  AND (concurrency IS NOT NULL OR rate_count IS NOT NULL OR key_concurrency IS NOT NULL
       OR worker_concurrency IS NOT NULL)
ORDER BY tenant, name;

-- == workflow queues ===================================================================

-- name: queues_with_enqueued
-- The workflow queues with runs waiting for admission, by tenant and name.
-- (SQLite's planner, without statistics, would scan every queued run ever started.)
SELECT DISTINCT tenant, named_queue AS name FROM runs INDEXED BY runs_enqueued
WHERE status = 'enqueued' AND named_queue IS NOT NULL
ORDER BY tenant, name
LIMIT :limit;

-- name: count_workers_serving
-- Live workers that take attempts of a named queue (their heartbeat names it).
SELECT count(*) AS n FROM workers w
WHERE w.heartbeat_at >= :since
  AND EXISTS (SELECT 1 FROM json_each(w.queues) WHERE value = :entry);

-- name: renew_plain_leases
-- Many leases at once, none with a heartbeat to record: :refs is a JSON array of
-- [tenant, run_id, kind, step, fence]; returns the ones still held.
UPDATE tasks SET
    visible_at = min(:lease_until, coalesce(deadline, :lease_until),
                     coalesce(heartbeat_deadline, :lease_until))
FROM (SELECT json_extract(value, '$[0]') AS tenant, json_extract(value, '$[1]') AS run_id,
             json_extract(value, '$[2]') AS kind, json_extract(value, '$[3]') AS step,
             json_extract(value, '$[4]') AS fence
      FROM json_each(:refs)) AS r
WHERE tasks.tenant = r.tenant AND tasks.run_id = r.run_id AND tasks.kind = r.kind
  AND tasks.step = r.step AND tasks.fence = r.fence
  AND tasks.owner = :owner AND tasks.state = 'leased'
RETURNING tasks.tenant, tasks.run_id, tasks.kind, tasks.step, tasks.fence, tasks.cancel_requested;

-- name: take_due_timers
-- Mark at most :limit due timers fired, earliest first, in one statement; returns them.
UPDATE timers SET status = 'fired'
WHERE (tenant, run_id, step) IN (SELECT tenant, run_id, step FROM timers
                                 WHERE status = 'pending' AND fire_at <= :now
                                   AND NOT EXISTS (SELECT 1 FROM tenants d WHERE d.tenant = timers.tenant AND d.disabled_at IS NOT NULL)
                                 ORDER BY fire_at LIMIT :limit)
RETURNING tenant, run_id, step, generation, fire_at;

-- == identities ==========================================================================
-- What a name is already in a tenant, before a tenant admin makes a credential for it.

-- name: identity_as_approver
-- An approver named in a pending approval's policy (the tenant's pending approvals are
-- found on approvals_by_status).
SELECT approval_id FROM approvals
WHERE tenant = :tenant AND status = 'pending'
  AND EXISTS (SELECT 1 FROM json_each(approvals.policy, '$.users') AS u WHERE u.value = :name)
LIMIT 1;
