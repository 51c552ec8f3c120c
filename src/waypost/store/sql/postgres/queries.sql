-- Queries of the PostgreSQL store. Each section starts with "-- name: <name>".
-- Parameters are named (%(name)s). Rows are read in transactions.py, shared with SQLite.
-- Rows a transaction reads and then changes are locked (FOR UPDATE); claims skip
-- rows other transactions hold (SKIP LOCKED).

-- name: get_run
SELECT tenant, run_id, workflow, version, status, input, result, error, waiting_for,
       last_seq, last_hash, processed_seq, created_at, updated_at, finished_at
FROM runs WHERE tenant = %(tenant)s AND run_id = %(run_id)s;

-- name: list_runs
SELECT tenant, run_id, workflow, version, status, input, result, error, waiting_for,
       last_seq, last_hash, processed_seq, created_at, updated_at, finished_at
FROM runs
WHERE (%(tenant)s::text IS NULL OR tenant = %(tenant)s::text)
  AND (%(status)s::text IS NULL OR status = %(status)s::text)
  AND (%(workflow)s::text IS NULL OR workflow = %(workflow)s::text)
ORDER BY created_at DESC, run_id
LIMIT %(limit)s;

-- name: insert_run
INSERT INTO runs (tenant, run_id, workflow, version, status, input, waiting_for,
                  last_seq, last_hash, processed_seq, created_at, updated_at)
VALUES (%(tenant)s, %(run_id)s, %(workflow)s, %(version)s, 'running', %(input)s, '[]',
        %(last_seq)s, %(last_hash)s, 0, %(now)s, %(now)s);

-- name: run_head
SELECT last_seq, last_hash, status FROM runs WHERE tenant = %(tenant)s AND run_id = %(run_id)s
FOR UPDATE;

-- name: advance_run_checked
UPDATE runs SET last_seq = %(last_seq)s, last_hash = %(last_hash)s, updated_at = %(now)s
WHERE tenant = %(tenant)s AND run_id = %(run_id)s AND last_seq = %(expect_seq)s
  AND last_hash = %(expect_hash)s;

-- name: set_run_version
UPDATE runs SET version = %(version)s WHERE tenant = %(tenant)s AND run_id = %(run_id)s;

-- name: advance_run_snapshot
UPDATE runs SET last_seq = %(last_seq)s, last_hash = %(last_hash)s, updated_at = %(now)s,
                status = %(status)s, waiting_for = %(waiting_for)s, processed_seq = %(processed_seq)s,
                result = %(result)s, error = %(error)s, finished_at = %(finished_at)s
WHERE tenant = %(tenant)s AND run_id = %(run_id)s AND last_seq = %(expect_seq)s
  AND last_hash = %(expect_hash)s;

-- name: insert_event
INSERT INTO events (tenant, run_id, seq, type, data, ts, hash)
VALUES (%(tenant)s, %(run_id)s, %(seq)s, %(type)s, %(data)s, %(ts)s, %(hash)s);

-- name: load_history
SELECT seq, type, data, ts, hash FROM events
WHERE tenant = %(tenant)s AND run_id = %(run_id)s AND seq > %(after_seq)s
ORDER BY seq;

-- name: insert_workflow_task
INSERT INTO tasks (tenant, run_id, kind, step, queue, state, visible_at, owner, fence, created_at)
VALUES (%(tenant)s, %(run_id)s, 'workflow', '', %(queue)s, %(state)s, %(visible_at)s, %(owner)s, %(fence)s, %(now)s);

-- name: workflow_task
SELECT state, visible_at, owner, fence, queue FROM tasks
WHERE tenant = %(tenant)s AND run_id = %(run_id)s AND kind = 'workflow' AND step = ''
FOR UPDATE;

-- name: set_workflow_task
UPDATE tasks SET state = %(state)s, visible_at = %(visible_at)s, owner = %(owner)s, fence = %(fence)s
WHERE tenant = %(tenant)s AND run_id = %(run_id)s AND kind = 'workflow' AND step = '';

-- name: delete_workflow_task
DELETE FROM tasks WHERE tenant = %(tenant)s AND run_id = %(run_id)s AND kind = 'workflow' AND step = '';

-- name: insert_activity_task
INSERT INTO tasks (tenant, run_id, kind, step, queue, state, visible_at, owner, fence, attempt,
                   started_at, deadline, heartbeat_deadline, timeout, heartbeat_timeout, spec,
                   created_at)
VALUES (%(tenant)s, %(run_id)s, 'activity', %(step)s, %(queue)s, %(state)s, %(visible_at)s, %(owner)s, %(fence)s,
        %(attempt)s, %(started_at)s, %(deadline)s, %(heartbeat_deadline)s, %(timeout)s, %(heartbeat_timeout)s,
        %(spec)s, %(now)s);

-- name: finish_activity_task
DELETE FROM tasks
WHERE tenant = %(tenant)s AND run_id = %(run_id)s AND kind = 'activity' AND step = %(step)s
  AND fence = %(fence)s AND state = 'leased';

-- name: retry_activity_task
UPDATE tasks SET state = 'ready', visible_at = %(retry_at)s, owner = NULL, started_at = NULL,
                 deadline = NULL, heartbeat_deadline = NULL,
                 heartbeat_details = coalesce(%(heartbeat_details)s::text, heartbeat_details)
WHERE tenant = %(tenant)s AND run_id = %(run_id)s AND kind = 'activity' AND step = %(step)s
  AND fence = %(fence)s AND state = 'leased';

-- name: delete_ready_activity
DELETE FROM tasks
WHERE tenant = %(tenant)s AND run_id = %(run_id)s AND kind = 'activity' AND step = %(step)s
  AND state = 'ready';

-- name: request_activity_cancel
UPDATE tasks SET cancel_requested = true
WHERE tenant = %(tenant)s AND run_id = %(run_id)s AND kind = 'activity' AND step = %(step)s;

-- name: delete_run_tasks
DELETE FROM tasks WHERE tenant = %(tenant)s AND run_id = %(run_id)s;

-- name: insert_timer
INSERT INTO timers (tenant, run_id, step, fire_at, generation, status)
VALUES (%(tenant)s, %(run_id)s, %(step)s, %(fire_at)s, 1, 'pending');

-- name: cancel_timer
UPDATE timers SET status = 'cancelled'
WHERE tenant = %(tenant)s AND run_id = %(run_id)s AND step = %(step)s AND status = 'pending';

-- name: delete_run_timers
DELETE FROM timers WHERE tenant = %(tenant)s AND run_id = %(run_id)s;

-- name: due_timers
SELECT tenant, run_id, step, generation FROM timers
WHERE status = 'pending' AND fire_at <= %(now)s
ORDER BY fire_at
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: fire_timer
UPDATE timers SET status = 'fired'
WHERE tenant = %(tenant)s AND run_id = %(run_id)s AND step = %(step)s
  AND generation = %(generation)s AND status = 'pending';

-- name: next_timer_at
SELECT min(fire_at) FROM timers WHERE status = 'pending';

-- name: claim_workflow_tasks
UPDATE tasks SET state = 'leased', owner = %(owner)s, fence = fence + 1, visible_at = %(lease_until)s,
                 started_at = %(now)s
WHERE (tenant, run_id, kind, step) IN (
    SELECT tenant, run_id, kind, step FROM tasks
    WHERE kind = 'workflow' AND state IN ('ready', 'leased') AND visible_at <= %(now)s
      AND queue IN (SELECT jsonb_array_elements_text(%(queues)s::jsonb))
    ORDER BY visible_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED)
RETURNING kind, tenant, run_id, step, queue, fence, attempt, spec, deadline,
          heartbeat_deadline, visible_at, owner, heartbeat_details, cancel_requested;

-- name: claim_activity_tasks
UPDATE tasks SET state = 'leased', owner = %(owner)s, fence = fence + 1, attempt = attempt + 1,
                 started_at = %(now)s,
                 deadline = %(now)s + timeout,
                 heartbeat_deadline = %(now)s + heartbeat_timeout,
                 visible_at = LEAST(%(lease_until)s, %(now)s + timeout,
                                  coalesce(%(now)s + heartbeat_timeout, %(lease_until)s))
WHERE (tenant, run_id, kind, step) IN (
    SELECT tenant, run_id, kind, step FROM tasks
    WHERE kind = 'activity' AND state = 'ready' AND visible_at <= %(now)s
      AND queue IN (SELECT jsonb_array_elements_text(%(queues)s::jsonb))
    ORDER BY visible_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED)
RETURNING kind, tenant, run_id, step, queue, fence, attempt, spec, deadline,
          heartbeat_deadline, visible_at, owner, heartbeat_details, cancel_requested;

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

-- name: release_task
UPDATE tasks SET state = 'ready', visible_at = %(now)s, owner = NULL, started_at = NULL,
                 deadline = NULL, heartbeat_deadline = NULL,
                 attempt = CASE WHEN kind = 'activity' THEN attempt - 1 ELSE attempt END
WHERE tenant = %(tenant)s AND run_id = %(run_id)s AND kind = %(kind)s AND step = %(step)s
  AND fence = %(fence)s AND owner = %(owner)s AND state = 'leased';

-- name: expired_activities
SELECT kind, tenant, run_id, step, queue, fence, attempt, spec, deadline,
       heartbeat_deadline, visible_at, owner, heartbeat_details, cancel_requested
FROM tasks
WHERE kind = 'activity' AND state = 'leased' AND visible_at <= %(now)s
ORDER BY visible_at
LIMIT %(limit)s;

-- name: run_tasks
SELECT kind, tenant, run_id, step, queue, fence, attempt, spec, deadline,
       heartbeat_deadline, visible_at, owner, heartbeat_details, cancel_requested
FROM tasks WHERE tenant = %(tenant)s AND run_id = %(run_id)s ORDER BY kind DESC, created_at, step;

-- name: beat_worker
INSERT INTO workers (worker_id, host, pid, queues, started_at, heartbeat_at)
VALUES (%(worker_id)s, %(host)s, %(pid)s, %(queues)s, %(started_at)s, %(heartbeat_at)s)
ON CONFLICT (worker_id) DO UPDATE SET queues = excluded.queues, heartbeat_at = excluded.heartbeat_at;

-- name: remove_worker
DELETE FROM workers WHERE worker_id = %(worker_id)s;

-- name: live_workers
SELECT worker_id, host, pid, queues, started_at, heartbeat_at FROM workers
WHERE heartbeat_at >= %(since)s ORDER BY worker_id;

-- == approvals ===================================================================

-- name: insert_approval
INSERT INTO approvals (tenant, approval_id, run_id, step, timer_step, name, policy, status,
                       started_by, data, expires_at, created_at)
VALUES (%(tenant)s, %(approval_id)s, %(run_id)s, %(step)s, %(timer_step)s, %(name)s, %(policy)s, 'pending',
        %(started_by)s, %(data)s, %(expires_at)s, %(now)s)
ON CONFLICT DO NOTHING;

-- name: get_approval
SELECT tenant, approval_id, run_id, step, timer_step, name, policy, status, started_by, data,
       expires_at, created_at, closed_at
FROM approvals WHERE tenant = %(tenant)s AND approval_id = %(approval_id)s;

-- name: lock_approval
SELECT tenant, approval_id, run_id, step, timer_step, name, policy, status, started_by, data,
       expires_at, created_at, closed_at
FROM approvals WHERE tenant = %(tenant)s AND approval_id = %(approval_id)s
FOR UPDATE;

-- name: list_approvals
SELECT tenant, approval_id, run_id, step, timer_step, name, policy, status, started_by, data,
       expires_at, created_at, closed_at
FROM approvals
WHERE (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
  AND (%(status)s::text IS NULL OR status = %(status)s)
  AND (%(run_id)s::text IS NULL OR run_id = %(run_id)s)
ORDER BY created_at, approval_id
LIMIT %(limit)s;

-- name: close_approval
UPDATE approvals SET status = %(status)s, closed_at = %(now)s
WHERE tenant = %(tenant)s AND approval_id = %(approval_id)s AND status = 'pending';

-- name: close_run_approvals
UPDATE approvals SET status = %(status)s, closed_at = %(now)s
WHERE tenant = %(tenant)s AND run_id = %(run_id)s AND status = 'pending';

-- name: set_approval_policy
UPDATE approvals SET policy = %(policy)s
WHERE tenant = %(tenant)s AND approval_id = %(approval_id)s AND status = 'pending';

-- name: insert_credential
INSERT INTO approval_credentials (tenant, credential_id, approval_id, approver, action,
                                  secret_hash, status, expires_at, created_at)
VALUES (%(tenant)s, %(credential_id)s, %(approval_id)s, %(approver)s, %(action)s, %(secret_hash)s, 'active',
        %(expires_at)s, %(now)s);

-- name: get_credential
SELECT tenant, credential_id, approval_id, approver, action, secret_hash, status, expires_at
FROM approval_credentials WHERE tenant = %(tenant)s AND credential_id = %(credential_id)s;

-- name: use_credential
UPDATE approval_credentials SET status = 'used', used_at = %(now)s
WHERE tenant = %(tenant)s AND credential_id = %(credential_id)s AND approval_id = %(approval_id)s
  AND status = 'active' AND (expires_at IS NULL OR expires_at > %(now)s);

-- name: retire_approver_credentials
UPDATE approval_credentials SET status = %(status)s, used_at = %(now)s
WHERE tenant = %(tenant)s AND approval_id = %(approval_id)s AND approver = %(approver)s
  AND status = 'active';

-- name: revoke_approval_credentials
UPDATE approval_credentials SET status = 'revoked', used_at = %(now)s
WHERE tenant = %(tenant)s AND approval_id = %(approval_id)s AND status = 'active';

-- name: revoke_run_credentials
UPDATE approval_credentials SET status = 'revoked', used_at = %(now)s
WHERE tenant = %(tenant)s AND status = 'active' AND approval_id IN (
    SELECT approval_id FROM approvals WHERE tenant = %(tenant)s AND run_id = %(run_id)s);

-- name: insert_vote
INSERT INTO approval_votes (tenant, approval_id, principal, decision, comment, credential_id, at)
VALUES (%(tenant)s, %(approval_id)s, %(principal)s, %(decision)s, %(comment)s, %(credential_id)s, %(now)s)
ON CONFLICT DO NOTHING;

-- name: approval_votes
SELECT principal, decision, comment, at FROM approval_votes
WHERE tenant = %(tenant)s AND approval_id = %(approval_id)s
ORDER BY at, principal;

-- name: timer_status
SELECT status FROM timers WHERE tenant = %(tenant)s AND run_id = %(run_id)s AND step = %(step)s
FOR UPDATE;

-- == the built-in directory =========================================================

-- name: add_group_member
INSERT INTO group_members (tenant, group_name, principal, added_at)
VALUES (%(tenant)s, %(group_name)s, %(principal)s, %(now)s)
ON CONFLICT DO NOTHING;

-- name: remove_group_member
DELETE FROM group_members
WHERE tenant = %(tenant)s AND group_name = %(group_name)s AND principal = %(principal)s;

-- name: group_members
SELECT principal FROM group_members
WHERE tenant = %(tenant)s AND group_name = %(group_name)s ORDER BY principal;

-- name: list_groups
SELECT group_name, principal FROM group_members WHERE tenant = %(tenant)s
ORDER BY group_name, principal;

-- == the outbox =====================================================================

-- name: insert_outbox
INSERT INTO outbox (id, tenant, kind, payload, status, attempts, visible_at, created_at)
VALUES (%(id)s, %(tenant)s, %(kind)s, %(payload)s, 'pending', 0, %(now)s, %(now)s)
ON CONFLICT DO NOTHING;

-- name: claim_outbox
UPDATE outbox SET owner = %(owner)s, visible_at = %(lease_until)s, attempts = attempts + 1
WHERE id IN (
    SELECT id FROM outbox WHERE status = 'pending' AND visible_at <= %(now)s
    ORDER BY visible_at LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED)
RETURNING id, tenant, kind, payload, attempts;

-- name: outbox_sent
UPDATE outbox SET status = 'sent', sent_at = %(now)s, owner = NULL, last_error = NULL
WHERE id = %(id)s AND owner = %(owner)s AND status = 'pending';

-- name: outbox_retry
UPDATE outbox SET visible_at = %(retry_at)s, owner = NULL, last_error = %(error)s
WHERE id = %(id)s AND owner = %(owner)s AND status = 'pending';

-- name: outbox_failed
UPDATE outbox SET status = 'failed', owner = NULL, last_error = %(error)s
WHERE id = %(id)s AND owner = %(owner)s AND status = 'pending';

-- == definitions ======================================================================

-- name: definition_by_digest
SELECT version FROM definitions WHERE tenant = %(tenant)s AND name = %(name)s AND digest = %(digest)s;

-- name: newest_definition_version
SELECT max(version) FROM definitions WHERE tenant = %(tenant)s AND name = %(name)s;

-- name: insert_definition
INSERT INTO definitions (tenant, name, version, digest, body, source, published_at, published_by)
VALUES (%(tenant)s, %(name)s, %(version)s, %(digest)s, %(body)s, %(source)s, %(now)s, %(by)s)
ON CONFLICT DO NOTHING;

-- name: get_definition
SELECT tenant, name, version, digest, body, source, published_at, published_by
FROM definitions WHERE tenant = %(tenant)s AND name = %(name)s AND version = %(version)s;

-- name: get_newest_definition
SELECT tenant, name, version, digest, body, source, published_at, published_by
FROM definitions WHERE tenant = %(tenant)s AND name = %(name)s
ORDER BY version DESC LIMIT 1;

-- name: list_definitions
SELECT tenant, name, version, digest, body, source, published_at, published_by
FROM definitions WHERE tenant = %(tenant)s
ORDER BY name, version;
