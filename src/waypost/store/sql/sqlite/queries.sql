-- Queries of the SQLite store. Each section starts with "-- name: <name>".
-- Parameters are named (:name). Shapes of rows returned are read in sqlite.py.

-- name: get_run
SELECT tenant, run_id, workflow, version, status, input, result, error, waiting_for,
       last_seq, last_hash, processed_seq, created_at, updated_at, finished_at
FROM runs WHERE tenant = :tenant AND run_id = :run_id;

-- name: list_runs
SELECT tenant, run_id, workflow, version, status, input, result, error, waiting_for,
       last_seq, last_hash, processed_seq, created_at, updated_at, finished_at
FROM runs
WHERE (:tenant IS NULL OR tenant = :tenant)
  AND (:status IS NULL OR status = :status)
  AND (:workflow IS NULL OR workflow = :workflow)
ORDER BY created_at DESC, run_id
LIMIT :limit;

-- name: insert_run
INSERT INTO runs (tenant, run_id, workflow, version, status, input, waiting_for,
                  last_seq, last_hash, processed_seq, created_at, updated_at)
VALUES (:tenant, :run_id, :workflow, :version, 'running', :input, '[]',
        :last_seq, :last_hash, 0, :now, :now);

-- name: run_head
SELECT last_seq, last_hash, status FROM runs WHERE tenant = :tenant AND run_id = :run_id;

-- name: advance_run_checked
UPDATE runs SET last_seq = :last_seq, last_hash = :last_hash, updated_at = :now
WHERE tenant = :tenant AND run_id = :run_id AND last_seq = :expect_seq
  AND last_hash = :expect_hash;

-- name: advance_run_snapshot
UPDATE runs SET last_seq = :last_seq, last_hash = :last_hash, updated_at = :now,
                status = :status, waiting_for = :waiting_for, processed_seq = :processed_seq,
                result = :result, error = :error, finished_at = :finished_at
WHERE tenant = :tenant AND run_id = :run_id AND last_seq = :expect_seq
  AND last_hash = :expect_hash;

-- name: insert_event
INSERT INTO events (tenant, run_id, seq, type, data, ts, hash)
VALUES (:tenant, :run_id, :seq, :type, :data, :ts, :hash);

-- name: load_history
SELECT seq, type, data, ts, hash FROM events
WHERE tenant = :tenant AND run_id = :run_id AND seq > :after_seq
ORDER BY seq;

-- name: insert_workflow_task
INSERT INTO tasks (tenant, run_id, kind, step, queue, state, visible_at, owner, fence, created_at)
VALUES (:tenant, :run_id, 'workflow', '', :queue, :state, :visible_at, :owner, :fence, :now);

-- name: workflow_task
SELECT state, visible_at, owner, fence, queue FROM tasks
WHERE tenant = :tenant AND run_id = :run_id AND kind = 'workflow' AND step = '';

-- name: set_workflow_task
UPDATE tasks SET state = :state, visible_at = :visible_at, owner = :owner, fence = :fence
WHERE tenant = :tenant AND run_id = :run_id AND kind = 'workflow' AND step = '';

-- name: delete_workflow_task
DELETE FROM tasks WHERE tenant = :tenant AND run_id = :run_id AND kind = 'workflow' AND step = '';

-- name: insert_activity_task
INSERT INTO tasks (tenant, run_id, kind, step, queue, state, visible_at, owner, fence, attempt,
                   started_at, deadline, heartbeat_deadline, timeout, heartbeat_timeout, spec,
                   created_at)
VALUES (:tenant, :run_id, 'activity', :step, :queue, :state, :visible_at, :owner, :fence,
        :attempt, :started_at, :deadline, :heartbeat_deadline, :timeout, :heartbeat_timeout,
        :spec, :now);

-- name: finish_activity_task
DELETE FROM tasks
WHERE tenant = :tenant AND run_id = :run_id AND kind = 'activity' AND step = :step
  AND fence = :fence AND state = 'leased';

-- name: retry_activity_task
UPDATE tasks SET state = 'ready', visible_at = :retry_at, owner = NULL, started_at = NULL,
                 deadline = NULL, heartbeat_deadline = NULL,
                 heartbeat_details = coalesce(:heartbeat_details, heartbeat_details)
WHERE tenant = :tenant AND run_id = :run_id AND kind = 'activity' AND step = :step
  AND fence = :fence AND state = 'leased';

-- name: delete_ready_activity
DELETE FROM tasks
WHERE tenant = :tenant AND run_id = :run_id AND kind = 'activity' AND step = :step
  AND state = 'ready';

-- name: request_activity_cancel
UPDATE tasks SET cancel_requested = 1
WHERE tenant = :tenant AND run_id = :run_id AND kind = 'activity' AND step = :step;

-- name: delete_run_tasks
DELETE FROM tasks WHERE tenant = :tenant AND run_id = :run_id;

-- name: insert_timer
INSERT INTO timers (tenant, run_id, step, fire_at, generation, status)
VALUES (:tenant, :run_id, :step, :fire_at, 1, 'pending');

-- name: cancel_timer
UPDATE timers SET status = 'cancelled'
WHERE tenant = :tenant AND run_id = :run_id AND step = :step AND status = 'pending';

-- name: delete_run_timers
DELETE FROM timers WHERE tenant = :tenant AND run_id = :run_id;

-- name: due_timers
SELECT tenant, run_id, step, generation FROM timers
WHERE status = 'pending' AND fire_at <= :now
ORDER BY fire_at
LIMIT :limit;

-- name: fire_timer
UPDATE timers SET status = 'fired'
WHERE tenant = :tenant AND run_id = :run_id AND step = :step
  AND generation = :generation AND status = 'pending';

-- name: next_timer_at
SELECT min(fire_at) FROM timers WHERE status = 'pending';

-- name: claim_workflow_tasks
UPDATE tasks SET state = 'leased', owner = :owner, fence = fence + 1, visible_at = :lease_until,
                 started_at = :now
WHERE (tenant, run_id, kind, step) IN (
    SELECT tenant, run_id, kind, step FROM tasks
    WHERE kind = 'workflow' AND state IN ('ready', 'leased') AND visible_at <= :now
      AND queue IN (SELECT value FROM json_each(:queues))
    ORDER BY visible_at
    LIMIT :limit)
RETURNING kind, tenant, run_id, step, queue, fence, attempt, spec, deadline,
          heartbeat_deadline, visible_at, owner, heartbeat_details, cancel_requested;

-- name: claim_activity_tasks
UPDATE tasks SET state = 'leased', owner = :owner, fence = fence + 1, attempt = attempt + 1,
                 started_at = :now,
                 deadline = :now + timeout,
                 heartbeat_deadline = :now + heartbeat_timeout,
                 visible_at = min(:lease_until, :now + timeout,
                                  coalesce(:now + heartbeat_timeout, :lease_until))
WHERE (tenant, run_id, kind, step) IN (
    SELECT tenant, run_id, kind, step FROM tasks
    WHERE kind = 'activity' AND state = 'ready' AND visible_at <= :now
      AND queue IN (SELECT value FROM json_each(:queues))
    ORDER BY visible_at
    LIMIT :limit)
RETURNING kind, tenant, run_id, step, queue, fence, attempt, spec, deadline,
          heartbeat_deadline, visible_at, owner, heartbeat_details, cancel_requested;

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

-- name: release_task
UPDATE tasks SET state = 'ready', visible_at = :now, owner = NULL, started_at = NULL,
                 deadline = NULL, heartbeat_deadline = NULL,
                 attempt = CASE WHEN kind = 'activity' THEN attempt - 1 ELSE attempt END
WHERE tenant = :tenant AND run_id = :run_id AND kind = :kind AND step = :step
  AND fence = :fence AND owner = :owner AND state = 'leased';

-- name: expired_activities
SELECT kind, tenant, run_id, step, queue, fence, attempt, spec, deadline,
       heartbeat_deadline, visible_at, owner, heartbeat_details, cancel_requested
FROM tasks
WHERE kind = 'activity' AND state = 'leased' AND visible_at <= :now
ORDER BY visible_at
LIMIT :limit;

-- name: run_tasks
SELECT kind, tenant, run_id, step, queue, fence, attempt, spec, deadline,
       heartbeat_deadline, visible_at, owner, heartbeat_details, cancel_requested
FROM tasks WHERE tenant = :tenant AND run_id = :run_id ORDER BY kind DESC, created_at, step;

-- name: beat_worker
INSERT INTO workers (worker_id, host, pid, queues, started_at, heartbeat_at)
VALUES (:worker_id, :host, :pid, :queues, :started_at, :heartbeat_at)
ON CONFLICT (worker_id) DO UPDATE SET queues = excluded.queues, heartbeat_at = excluded.heartbeat_at;

-- name: remove_worker
DELETE FROM workers WHERE worker_id = :worker_id;

-- name: live_workers
SELECT worker_id, host, pid, queues, started_at, heartbeat_at FROM workers
WHERE heartbeat_at >= :since ORDER BY worker_id;
