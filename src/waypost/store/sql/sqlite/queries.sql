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

-- name: set_run_version
UPDATE runs SET version = :version WHERE tenant = :tenant AND run_id = :run_id;

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

-- == approvals ===================================================================

-- name: insert_approval
INSERT INTO approvals (tenant, approval_id, run_id, step, timer_step, name, policy, status,
                       started_by, data, expires_at, created_at)
VALUES (:tenant, :approval_id, :run_id, :step, :timer_step, :name, :policy, 'pending',
        :started_by, :data, :expires_at, :now)
ON CONFLICT DO NOTHING;

-- name: get_approval
SELECT tenant, approval_id, run_id, step, timer_step, name, policy, status, started_by, data,
       expires_at, created_at, closed_at
FROM approvals WHERE tenant = :tenant AND approval_id = :approval_id;

-- name: lock_approval
SELECT tenant, approval_id, run_id, step, timer_step, name, policy, status, started_by, data,
       expires_at, created_at, closed_at
FROM approvals WHERE tenant = :tenant AND approval_id = :approval_id;

-- name: list_approvals
SELECT tenant, approval_id, run_id, step, timer_step, name, policy, status, started_by, data,
       expires_at, created_at, closed_at
FROM approvals
WHERE (:tenant IS NULL OR tenant = :tenant)
  AND (:status IS NULL OR status = :status)
  AND (:run_id IS NULL OR run_id = :run_id)
ORDER BY created_at, approval_id
LIMIT :limit;

-- name: close_approval
UPDATE approvals SET status = :status, closed_at = :now
WHERE tenant = :tenant AND approval_id = :approval_id AND status = 'pending';

-- name: close_run_approvals
UPDATE approvals SET status = :status, closed_at = :now
WHERE tenant = :tenant AND run_id = :run_id AND status = 'pending';

-- name: set_approval_policy
UPDATE approvals SET policy = :policy
WHERE tenant = :tenant AND approval_id = :approval_id AND status = 'pending';

-- name: insert_credential
INSERT INTO approval_credentials (tenant, credential_id, approval_id, approver, action,
                                  secret_hash, status, expires_at, created_at)
VALUES (:tenant, :credential_id, :approval_id, :approver, :action, :secret_hash, 'active',
        :expires_at, :now);

-- name: get_credential
SELECT tenant, credential_id, approval_id, approver, action, secret_hash, status, expires_at
FROM approval_credentials WHERE tenant = :tenant AND credential_id = :credential_id;

-- name: use_credential
UPDATE approval_credentials SET status = 'used', used_at = :now
WHERE tenant = :tenant AND credential_id = :credential_id AND approval_id = :approval_id
  AND status = 'active' AND (expires_at IS NULL OR expires_at > :now);

-- name: retire_approver_credentials
UPDATE approval_credentials SET status = :status, used_at = :now
WHERE tenant = :tenant AND approval_id = :approval_id AND approver = :approver
  AND status = 'active';

-- name: revoke_approval_credentials
UPDATE approval_credentials SET status = 'revoked', used_at = :now
WHERE tenant = :tenant AND approval_id = :approval_id AND status = 'active';

-- name: revoke_run_credentials
UPDATE approval_credentials SET status = 'revoked', used_at = :now
WHERE tenant = :tenant AND status = 'active' AND approval_id IN (
    SELECT approval_id FROM approvals WHERE tenant = :tenant AND run_id = :run_id);

-- name: insert_vote
INSERT INTO approval_votes (tenant, approval_id, principal, decision, comment, credential_id, at)
VALUES (:tenant, :approval_id, :principal, :decision, :comment, :credential_id, :now)
ON CONFLICT DO NOTHING;

-- name: approval_votes
SELECT principal, decision, comment, at FROM approval_votes
WHERE tenant = :tenant AND approval_id = :approval_id
ORDER BY at, principal;

-- name: timer_status
SELECT status FROM timers WHERE tenant = :tenant AND run_id = :run_id AND step = :step;

-- == the built-in directory =========================================================

-- name: add_group_member
INSERT INTO group_members (tenant, group_name, principal, added_at)
VALUES (:tenant, :group_name, :principal, :now)
ON CONFLICT DO NOTHING;

-- name: remove_group_member
DELETE FROM group_members
WHERE tenant = :tenant AND group_name = :group_name AND principal = :principal;

-- name: group_members
SELECT principal FROM group_members
WHERE tenant = :tenant AND group_name = :group_name ORDER BY principal;

-- name: list_groups
SELECT group_name, principal FROM group_members WHERE tenant = :tenant
ORDER BY group_name, principal;

-- == the outbox =====================================================================

-- name: insert_outbox
INSERT INTO outbox (id, tenant, kind, payload, status, attempts, visible_at, created_at)
VALUES (:id, :tenant, :kind, :payload, 'pending', 0, :now, :now)
ON CONFLICT DO NOTHING;

-- name: claim_outbox
UPDATE outbox SET owner = :owner, visible_at = :lease_until, attempts = attempts + 1
WHERE id IN (
    SELECT id FROM outbox WHERE status = 'pending' AND visible_at <= :now
    ORDER BY visible_at LIMIT :limit)
RETURNING id, tenant, kind, payload, attempts;

-- name: outbox_sent
UPDATE outbox SET status = 'sent', sent_at = :now, owner = NULL, last_error = NULL
WHERE id = :id AND owner = :owner AND status = 'pending';

-- name: outbox_retry
UPDATE outbox SET visible_at = :retry_at, owner = NULL, last_error = :error
WHERE id = :id AND owner = :owner AND status = 'pending';

-- name: outbox_failed
UPDATE outbox SET status = 'failed', owner = NULL, last_error = :error
WHERE id = :id AND owner = :owner AND status = 'pending';

-- == definitions ======================================================================

-- name: definition_by_digest
SELECT version FROM definitions WHERE tenant = :tenant AND name = :name AND digest = :digest;

-- name: newest_definition_version
SELECT max(version) FROM definitions WHERE tenant = :tenant AND name = :name;

-- name: insert_definition
INSERT INTO definitions (tenant, name, version, digest, body, source, published_at, published_by)
VALUES (:tenant, :name, :version, :digest, :body, :source, :now, :by)
ON CONFLICT DO NOTHING;

-- name: get_definition
SELECT tenant, name, version, digest, body, source, published_at, published_by
FROM definitions WHERE tenant = :tenant AND name = :name AND version = :version;

-- name: get_newest_definition
SELECT tenant, name, version, digest, body, source, published_at, published_by
FROM definitions WHERE tenant = :tenant AND name = :name
ORDER BY version DESC LIMIT 1;

-- name: list_definitions
SELECT tenant, name, version, digest, body, source, published_at, published_by
FROM definitions WHERE tenant = :tenant
ORDER BY name, version;
