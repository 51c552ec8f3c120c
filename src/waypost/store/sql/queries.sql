-- Queries of both stores, written once. Each query starts with "-- name: <name>".
-- Parameters are named (:name); for PostgreSQL they become psycopg's %(name)s as the
-- file is loaded (store/sqlfile.py). Rows are read by column name in transactions/:
-- every selected expression has an alias, the same in every dialect.
-- The SQL here is what both dialects accept. A `{x}` in a query is the part x (a
-- section "-- part: x"): written here, or in each dialect's file where it differs
-- (the row locks: {for_update} and {skip_locked} lock on PostgreSQL and are nothing on
-- SQLite, whose one writer holds the database). A dialect's own file
-- (<dialect>/queries.sql) holds the queries that differ; a query it names that is also
-- here replaces this one for that dialect (SQLite's name the index its planner would
-- miss: INDEXED BY).

-- part: run_columns
-- A run's row (`run_from_row`).
tenant, run_id, workflow, version, status, input, result, error, waiting_for,
       last_seq, last_hash, processed_seq, created_at, updated_at, finished_at, priority,
       input_mac, state_mac, history_bytes

-- name: get_run
SELECT {run_columns}
FROM runs WHERE tenant = :tenant AND run_id = :run_id;

-- name: list_runs
SELECT {run_columns}
{listed_runs};

-- name: list_run_sizes
-- `list_runs` bounded in bytes: the keys and payload sizes first (see page_run_sizes).
SELECT tenant, run_id, created_at, {run_size} AS size
{listed_runs};

-- part: listed_runs
-- The runs `list_runs` reads: of a tenant, a status, a workflow (each unless NULL).
FROM runs
WHERE (CAST(:tenant AS TEXT) IS NULL OR tenant = CAST(:tenant AS TEXT))
  AND (CAST(:status AS TEXT) IS NULL OR status = CAST(:status AS TEXT))
  AND (CAST(:workflow AS TEXT) IS NULL OR workflow = CAST(:workflow AS TEXT))
ORDER BY created_at DESC, run_id
LIMIT :limit

-- name: runs_by_ids
-- Some of a tenant's runs (`run_ids`: a JSON array), on the primary key: the rows of a
-- page whose sizes were read first.
SELECT {run_columns}
FROM runs WHERE tenant = :tenant AND run_id {in_run_ids};

-- name: page_run_sizes
-- Pages of one tenant's runs, newest first, after a position (created_at, run_id):
-- a keyset on an index, so a page reads its rows only. The first page starts after
-- (infinity, ''). Filtered by both, one of the two indexes is read (the planner picks).
-- The keys and the stored size of the runs' payloads (input, result, error) are read
-- first: a page stops before its bytes pass a bound, and `runs_by_ids` reads the rows
-- that fit, so what a page leaves out is never read.
SELECT run_id, created_at, {run_size} AS size FROM runs
WHERE tenant = :tenant
{page_after};

-- name: page_run_sizes_by_status
SELECT run_id, created_at, {run_size} AS size FROM runs
WHERE tenant = :tenant AND status = :status
{page_after};

-- name: page_run_sizes_by_workflow
SELECT run_id, created_at, {run_size} AS size FROM runs
WHERE tenant = :tenant AND workflow = :workflow
{page_after};

-- name: page_run_sizes_by_status_workflow
SELECT run_id, created_at, {run_size} AS size FROM runs
WHERE tenant = :tenant AND status = :status AND workflow = :workflow
{page_after};

-- name: page_run_sizes_by_workflow_version
-- A version is of a workflow: the workflow's index is read, its other versions skipped.
SELECT run_id, created_at, {run_size} AS size FROM runs
WHERE tenant = :tenant AND workflow = :workflow AND version = :version
{page_after};

-- name: page_run_sizes_by_status_workflow_version
SELECT run_id, created_at, {run_size} AS size FROM runs
WHERE tenant = :tenant AND status = :status AND workflow = :workflow AND version = :version
{page_after};

-- part: page_after
-- The rest of a page: after the position (created_at, run_id), newest first.
  AND (created_at, run_id) < (:after_at, :after_id)
ORDER BY created_at DESC, run_id DESC
LIMIT :limit

-- name: insert_run
INSERT INTO runs (tenant, run_id, workflow, version, status, input, waiting_for,
                  last_seq, last_hash, processed_seq, created_at, updated_at, priority,
                  concurrency_key, dedup_id, named_queue, input_mac, state_mac,
                  history_bytes)
VALUES (:tenant, :run_id, :workflow, :version, :status, :input, '[]',
        :last_seq, :last_hash, :processed_seq, :now, :now, :priority,
        :concurrency_key, :dedup_id, :named_queue, :input_mac, :state_mac,
        :history_bytes)
-- A run of that id, or a run not yet finished with that deduplication id, is there.
ON CONFLICT DO NOTHING;

-- name: run_by_dedup_id
SELECT run_id FROM runs
WHERE tenant = :tenant AND dedup_id = :dedup_id
  AND status IN ('enqueued', 'running', 'waiting', 'paused', 'suspended');

-- name: run_head
SELECT last_seq, last_hash, status, processed_seq, named_queue, history_bytes, unread_signals,
       signal_names
FROM runs WHERE tenant = :tenant AND run_id = :run_id
{for_update};

-- name: pending_signals
SELECT count(*) AS pending FROM events
WHERE tenant = :tenant AND run_id = :run_id AND seq > :after AND type = 'SignalReceived';

-- name: live_run_bytes
-- What the tenant's runs not yet finished hold (max_live_run_bytes), through runs_by_status.
SELECT coalesce(sum(history_bytes), 0) AS n FROM runs
WHERE tenant = :tenant AND status IN ('enqueued', 'running', 'waiting', 'paused', 'suspended');

-- name: advance_run_checked
UPDATE runs SET last_seq = :last_seq, last_hash = :last_hash, updated_at = :now,
                history_bytes = history_bytes + :added_bytes
WHERE tenant = :tenant AND run_id = :run_id AND last_seq = :expect_seq
  AND last_hash = :expect_hash
  -- the run's max_run_bytes, when the commit carries it
  AND (CAST(:max_bytes AS BIGINT) IS NULL OR history_bytes + :added_bytes <= CAST(:max_bytes AS BIGINT));

-- name: set_run_version
UPDATE runs SET version = :version WHERE tenant = :tenant AND run_id = :run_id;

-- name: advance_run_snapshot
UPDATE runs SET last_seq = :last_seq, last_hash = :last_hash, updated_at = :now,
                status = :status, waiting_for = :waiting_for, processed_seq = :processed_seq,
                result = :result, error = :error, finished_at = :finished_at,
                state_mac = :state_mac,
                history_bytes = history_bytes + :added_bytes,
                unread_signals = coalesce(:unread_signals, unread_signals),
                signal_names = CASE WHEN :names_known = 1 THEN :signal_names ELSE signal_names END
WHERE tenant = :tenant AND run_id = :run_id AND last_seq = :expect_seq
  AND (CAST(:max_bytes AS BIGINT) IS NULL OR history_bytes + :added_bytes <= CAST(:max_bytes AS BIGINT))
  AND last_hash = :expect_hash;

-- name: insert_event
INSERT INTO events (tenant, run_id, seq, type, data, ts, hash)
VALUES (:tenant, :run_id, :seq, :type, :data, :ts, :hash);

-- name: load_history
SELECT seq, type, data, ts, hash FROM events
WHERE tenant = :tenant AND run_id = :run_id AND seq > :after_seq
ORDER BY seq;

-- name: load_history_range
SELECT seq, type, data, ts, hash FROM events
WHERE tenant = :tenant AND run_id = :run_id AND seq > :after_seq
  AND seq <= :through
ORDER BY seq;

-- name: run_exists
SELECT 1 AS found FROM runs WHERE tenant = :tenant AND run_id = :run_id;

-- name: insert_workflow_task
INSERT INTO tasks (tenant, run_id, kind, step, queue, state, visible_at, owner, fence, created_at,
                   priority)
VALUES (:tenant, :run_id, 'workflow', '', :queue, :state, :visible_at, :owner, :fence, :now,
        :priority);

-- name: workflow_task
SELECT state, visible_at, owner, fence, queue, lapses FROM tasks
WHERE tenant = :tenant AND run_id = :run_id AND kind = 'workflow' AND step = ''
{for_update};

-- name: workflow_task_state
-- `workflow_task` for a read: the row not locked.
SELECT state, fence, queue FROM tasks
WHERE tenant = :tenant AND run_id = :run_id AND kind = 'workflow' AND step = '';

-- name: set_workflow_task
UPDATE tasks SET state = :state, visible_at = :visible_at, owner = :owner, fence = :fence,
                 lapses = :lapses
WHERE tenant = :tenant AND run_id = :run_id AND kind = 'workflow' AND step = '';

-- name: reset_run_lapses
-- An operator resumed the run: its tasks' lapses are counted afresh.
UPDATE tasks SET lapses = 0 WHERE tenant = :tenant AND run_id = :run_id AND lapses > 0;

-- name: delete_workflow_task
DELETE FROM tasks WHERE tenant = :tenant AND run_id = :run_id AND kind = 'workflow' AND step = '';

-- name: claim_workflow_tasks_of_tenant
-- One tenant's share of a claim: its highest priority first, then the oldest.
UPDATE tasks SET state = 'leased', owner = :owner, fence = fence + 1, visible_at = :lease_until,
                 started_at = :now
WHERE (tenant, run_id, kind, step) IN (
    SELECT tenant, run_id, kind, step FROM tasks
    WHERE kind = 'workflow' AND tenant = :tenant AND state = 'ready' AND visible_at <= :now
      AND queue {in_queues}
    ORDER BY priority DESC, visible_at
    LIMIT :limit
    {skip_locked})
RETURNING {claimed_task};

-- name: claim_lapsed_workflow_tasks
-- Workflow tasks whose holder stopped renewing its lease (a crashed engine's runs). Each
-- such claim counts a lapse; a task that lapsed before waits longer (lapses squared times
-- `backoff`, at most `backoff_most` seconds) after its lease ran out: a poison run backs off.
UPDATE tasks SET state = 'leased', owner = :owner, fence = fence + 1, visible_at = :lease_until,
                 started_at = :now, lapses = lapses + 1
WHERE (tenant, run_id, kind, step) IN (
    SELECT tenant, run_id, kind, step FROM tasks
    WHERE kind = 'workflow' AND state = 'leased' AND visible_at <= :now
      AND NOT EXISTS (SELECT 1 FROM tenants d WHERE d.tenant = tasks.tenant AND d.disabled_at IS NOT NULL)
      AND visible_at <= :now - {least}(:backoff_most, :backoff * lapses * lapses)
      AND queue {in_queues}
    ORDER BY visible_at
    LIMIT :limit
    {skip_locked})
RETURNING {claimed_task};

-- name: insert_activity_task
INSERT INTO tasks (tenant, run_id, kind, step, queue, state, visible_at, owner, fence, attempt,
                   started_at, deadline, heartbeat_deadline, timeout, heartbeat_timeout, spec,
                   created_at, priority, named_queue, concurrency_key)
VALUES (:tenant, :run_id, 'activity', :step, :queue, :state, :visible_at, :owner, :fence,
        :attempt, :started_at, :deadline, :heartbeat_deadline, :timeout, :heartbeat_timeout,
        :spec, :now,
        (SELECT priority FROM runs WHERE tenant = :tenant AND run_id = :run_id),
        :named_queue,
        (SELECT concurrency_key FROM runs WHERE tenant = :tenant AND run_id = :run_id));

-- name: finish_activity_task
DELETE FROM tasks
WHERE tenant = :tenant AND run_id = :run_id AND kind = 'activity' AND step = :step
  AND fence = :fence AND state = 'leased';

-- name: retry_activity_task
UPDATE tasks SET state = 'ready', visible_at = :retry_at, owner = NULL, started_at = NULL,
                 deadline = NULL, heartbeat_deadline = NULL, lapses = lapses + :lapsed,
                 heartbeat_details = coalesce(CAST(:heartbeat_details AS TEXT), heartbeat_details)
WHERE tenant = :tenant AND run_id = :run_id AND kind = 'activity' AND step = :step
  AND fence = :fence AND state = 'leased';

-- name: delete_ready_activity
DELETE FROM tasks
WHERE tenant = :tenant AND run_id = :run_id AND kind = 'activity' AND step = :step
  AND state = 'ready';

-- name: claim_activity_tasks_by_key
-- From one limited queue whose attempts are bounded per concurrency key: the n-th ready
-- attempt of a key is taken only if n more than the key's leased ones stays within
-- :per_key. (The queue's row, locked first, orders these claims; a window function
-- allows no row locks here, so the outer update checks the state again.)
UPDATE tasks SET {lease_attempt}
WHERE (tenant, run_id, kind, step) IN (
    SELECT tenant, run_id, kind, step FROM (
        SELECT t.tenant, t.run_id, t.kind, t.step, t.priority, t.visible_at, t.concurrency_key,
               row_number() OVER (PARTITION BY t.concurrency_key
                                  ORDER BY t.priority DESC, t.visible_at) AS nth
        FROM tasks t
        WHERE t.kind = 'activity' AND t.tenant = :tenant AND t.state = 'ready'
          AND t.visible_at <= :now AND t.named_queue = :named_queue
          AND t.queue {in_queues}
          AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.tenant = t.tenant
                            AND r.run_id = t.run_id
                            AND r.status IN ('paused', 'suspended'))) ranked
    WHERE concurrency_key IS NULL
       OR nth + (SELECT count(*) FROM tasks h
                 WHERE h.tenant = :tenant AND h.kind = 'activity'
                   AND h.named_queue = :named_queue AND h.state = 'leased'
                   AND h.concurrency_key = ranked.concurrency_key) <= :per_key
    ORDER BY priority DESC, visible_at
    LIMIT :limit)
  AND state = 'ready'
RETURNING {claimed_task};

-- part: lease_attempt
-- An activity task leased for a new attempt: fenced, with its deadlines from now.
state = 'leased', owner = :owner, fence = fence + 1, attempt = attempt + 1,
                 started_at = :now,
                 deadline = :now + timeout,
                 heartbeat_deadline = :now + heartbeat_timeout,
                 visible_at = {least}(:lease_until, :now + timeout,
                                      coalesce(:now + heartbeat_timeout, :lease_until))

-- part: claimed_task
-- The columns of a claimed task (`ClaimedTask`).
kind, tenant, run_id, step, queue, fence, attempt, spec, deadline,
          heartbeat_deadline, visible_at, owner, heartbeat_details, cancel_requested,
          lapses

-- name: delete_activity_task
-- A skipped step's task, whatever its state: a late result of its attempt is audit.
DELETE FROM tasks
WHERE tenant = :tenant AND run_id = :run_id AND kind = 'activity' AND step = :step;

-- name: request_activity_cancel
UPDATE tasks SET cancel_requested = true
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

-- name: next_timer_at
SELECT min(fire_at) AS next_fire_at FROM timers
WHERE status = 'pending'
  -- a disabled tenant's timers wait: they would otherwise always be due
  AND NOT EXISTS (SELECT 1 FROM tenants d WHERE d.tenant = timers.tenant AND d.disabled_at IS NOT NULL);

-- name: fair_tenants
-- The tenants with ready tasks of a kind, in name order after :after, at most :tenants,
-- with their quota overrides: one index probe per tenant (a loose scan of tasks_ready),
-- however long their queues.
WITH RECURSIVE found(tenant, n) AS (
    SELECT (SELECT tenant FROM tasks
            WHERE kind = :kind AND state = 'ready' AND tenant > :after
            ORDER BY tenant LIMIT 1), 1
    UNION ALL
    SELECT (SELECT tenant FROM tasks
            WHERE kind = :kind AND state = 'ready' AND tenant > found.tenant
            ORDER BY tenant LIMIT 1), n + 1
    FROM found WHERE found.tenant IS NOT NULL AND n < :tenants
)
SELECT found.tenant AS tenant, tenants.quotas AS quotas
FROM found LEFT JOIN tenants ON tenants.tenant = found.tenant
WHERE found.tenant IS NOT NULL
  AND tenants.disabled_at IS NULL  -- a disabled tenant's tasks are not claimed
ORDER BY found.n;

-- name: release_task
UPDATE tasks SET state = 'ready', visible_at = :now, owner = NULL, started_at = NULL,
                 deadline = NULL, heartbeat_deadline = NULL,
                 attempt = CASE WHEN kind = 'activity' THEN attempt - 1 ELSE attempt END
WHERE tenant = :tenant AND run_id = :run_id AND kind = :kind AND step = :step
  AND fence = :fence AND owner = :owner AND state = 'leased';

-- name: expired_activities
SELECT {claimed_task}
FROM tasks
WHERE kind = 'activity' AND state = 'leased' AND visible_at <= :now
ORDER BY visible_at
LIMIT :limit;

-- name: run_tasks
SELECT {claimed_task}
FROM tasks WHERE tenant = :tenant AND run_id = :run_id ORDER BY kind DESC, created_at, step;

-- name: beat_worker
INSERT INTO workers (worker_id, host, pid, queues, started_at, heartbeat_at)
VALUES (:worker_id, :host, :pid, :queues, :started_at, :heartbeat_at)
ON CONFLICT (worker_id) DO UPDATE SET queues = excluded.queues, heartbeat_at = excluded.heartbeat_at;

-- name: remove_worker
DELETE FROM workers WHERE worker_id = :worker_id;

-- name: release_owner_tasks
UPDATE tasks SET visible_at = :now
WHERE owner = :owner AND state = 'leased' AND visible_at > :now;

-- name: retime_activity_task
-- An attempt leased by a write that landed late (store/landing.py): its lease, deadline
-- and heartbeat deadline counted again from :now, as the attempt starts.
UPDATE tasks SET
    started_at = :now,
    deadline = :now + timeout,
    heartbeat_deadline = CASE WHEN heartbeat_timeout IS NULL THEN NULL
                              ELSE :now + heartbeat_timeout END,
    visible_at = :now + CASE
        WHEN heartbeat_timeout IS NOT NULL AND heartbeat_timeout < timeout
             AND heartbeat_timeout < :lease THEN heartbeat_timeout
        WHEN timeout < :lease THEN timeout
        ELSE :lease END
WHERE tenant = :tenant AND run_id = :run_id AND kind = :kind AND step = :step
  AND fence = :fence AND owner = :owner AND state = 'leased'
RETURNING deadline;

-- name: live_workers
SELECT worker_id, host, pid, queues, started_at, heartbeat_at FROM workers
WHERE heartbeat_at >= :since ORDER BY worker_id;

-- == approvals ===================================================================

-- name: insert_approval
INSERT INTO approvals (tenant, approval_id, run_id, step, timer_step, name, policy, status,
                       started_by, data, expires_at, created_at, mac)
VALUES (:tenant, :approval_id, :run_id, :step, :timer_step, :name, :policy, 'pending',
        :started_by, :data, :expires_at, :now, :mac)
ON CONFLICT DO NOTHING;

-- part: approval_columns
-- An approval's row (`approval_from_row`).
tenant, approval_id, run_id, step, timer_step, name, policy, status, started_by, data,
       expires_at, created_at, closed_at, mac

-- name: get_approval
SELECT {approval_columns}
FROM approvals WHERE tenant = :tenant AND approval_id = :approval_id;

-- name: lock_approval
SELECT {approval_columns}
FROM approvals WHERE tenant = :tenant AND approval_id = :approval_id
{for_update};

-- name: list_approvals
SELECT {approval_columns}
FROM approvals
WHERE (CAST(:tenant AS TEXT) IS NULL OR tenant = :tenant)
  AND (CAST(:status AS TEXT) IS NULL OR status = :status)
  AND (CAST(:run_id AS TEXT) IS NULL OR run_id = :run_id)
ORDER BY created_at, approval_id
LIMIT :limit;

-- name: close_approval
UPDATE approvals SET status = :status, closed_at = :now
WHERE tenant = :tenant AND approval_id = :approval_id AND status = 'pending';

-- name: close_run_approvals
UPDATE approvals SET status = :status, closed_at = :now
WHERE tenant = :tenant AND run_id = :run_id AND status = 'pending';

-- name: set_approval_policy
UPDATE approvals SET policy = :policy, mac = :mac
WHERE tenant = :tenant AND approval_id = :approval_id AND status = 'pending';

-- name: insert_credential
INSERT INTO approval_credentials (tenant, credential_id, approval_id, approver, action,
                                  secret_hash, status, expires_at, created_at)
VALUES (:tenant, :credential_id, :approval_id, :approver, :action, :secret_hash, 'active',
        :expires_at, :now);

-- name: get_credential
SELECT tenant, credential_id, approval_id, approver, action, secret_hash, status, expires_at
FROM approval_credentials WHERE tenant = :tenant AND credential_id = :credential_id;

-- name: find_credential
-- By the id alone, whatever the tenant (the approval page has only the token): the
-- unique index approval_credentials_by_id finds it.
SELECT tenant, credential_id, approval_id, approver, action, secret_hash, status, expires_at
FROM approval_credentials WHERE credential_id = :credential_id;

-- name: read_timer_status
-- Only reads (the approval page): nothing is locked.
SELECT status FROM timers WHERE tenant = :tenant AND run_id = :run_id AND step = :step;

-- name: use_credential
UPDATE approval_credentials SET status = 'used', used_at = :now
WHERE tenant = :tenant AND credential_id = :credential_id AND approval_id = :approval_id
  AND status = 'active' AND (expires_at IS NULL OR expires_at > :clock);

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
INSERT INTO approval_votes (tenant, approval_id, principal, decision, comment, credential_id, at,
                            auth, authenticated_by)
VALUES (:tenant, :approval_id, :principal, :decision, :comment, :credential_id, :now,
        :auth, :authenticated_by)
ON CONFLICT DO NOTHING;

-- name: approval_votes
SELECT principal, decision, comment, at, auth, authenticated_by FROM approval_votes
WHERE tenant = :tenant AND approval_id = :approval_id
ORDER BY at, principal;

-- name: count_refusal
UPDATE approval_refusals
SET attempts = attempts + 1, last_at = :now, decision = :decision,
    credential_id = :credential_id, auth = :auth, authenticated_by = :authenticated_by
WHERE tenant = :tenant AND approval_id = :approval_id AND principal = :principal
  AND reason = :reason;

-- name: kept_refusals
SELECT count(*) AS kept FROM approval_refusals
WHERE tenant = :tenant AND approval_id = :approval_id AND principal <> '';

-- name: insert_refusal
INSERT INTO approval_refusals (tenant, approval_id, principal, reason, decision, credential_id,
                               auth, attempts, first_at, last_at, authenticated_by)
VALUES (:tenant, :approval_id, :principal, :reason, :decision, :credential_id, :auth, 1,
        :now, :now, :authenticated_by);

-- name: approval_refusals
SELECT principal, reason, decision, credential_id, auth, attempts, first_at, last_at,
       authenticated_by
FROM approval_refusals
WHERE tenant = :tenant AND approval_id = :approval_id
ORDER BY principal = '', first_at, principal, reason;

-- name: timer_status
SELECT status FROM timers WHERE tenant = :tenant AND run_id = :run_id AND step = :step
{for_update};

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

-- name: is_group_member
SELECT 1 AS member FROM group_members
WHERE tenant = :tenant AND group_name = :group_name AND principal = :principal;

-- name: list_groups
SELECT group_name, principal FROM group_members WHERE tenant = :tenant
ORDER BY group_name, principal;

-- == the outbox =====================================================================

-- name: claim_outbox
UPDATE outbox SET owner = :owner, visible_at = :lease_until, attempts = attempts + 1
WHERE id IN (
    SELECT id FROM outbox WHERE status = 'pending' AND visible_at <= :now
      AND NOT EXISTS (SELECT 1 FROM tenants d WHERE d.tenant = outbox.tenant AND d.disabled_at IS NOT NULL)
    ORDER BY visible_at LIMIT :limit
    {skip_locked})
RETURNING id, tenant, kind, payload, attempts;

-- name: insert_outbox
INSERT INTO outbox (id, tenant, kind, payload, status, attempts, visible_at, created_at)
VALUES (:id, :tenant, :kind, :payload, 'pending', 0, :now, :now)
ON CONFLICT DO NOTHING;

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
SELECT max(version) AS newest_version FROM definitions WHERE tenant = :tenant AND name = :name;

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

-- name: list_definition_versions
SELECT tenant, name, version, digest, body, source, published_at, published_by
FROM definitions WHERE tenant = :tenant AND name = :name
ORDER BY version;

-- == tenants and API keys ===============================================================

-- name: insert_tenant
INSERT INTO tenants (tenant, created_at, created_by, quotas)
VALUES (:tenant, :now, :by, :quotas)
ON CONFLICT DO NOTHING;

-- name: tenant_exists
SELECT tenant FROM tenants WHERE tenant = :tenant;

-- name: list_tenants
SELECT tenant, created_at, created_by, quotas, disabled_at, disabled_by FROM tenants
ORDER BY tenant;

-- name: insert_api_key
INSERT INTO api_keys (key_id, tenant, principal, roles, secret_hash, created_at, created_by,
                      expires_at)
VALUES (:key_id, :tenant, :principal, :roles, :secret_hash, :now, :by, :expires_at)
ON CONFLICT DO NOTHING;

-- name: list_api_keys
SELECT key_id, tenant, principal, roles, secret_hash, created_at, created_by, expires_at,
       revoked_at, revoked_by, last_used_at
FROM api_keys WHERE tenant = :tenant
ORDER BY created_at, key_id;

-- name: get_api_key
SELECT key_id, tenant, principal, roles, secret_hash, created_at, created_by, expires_at,
       revoked_at, revoked_by, last_used_at
FROM api_keys WHERE tenant = :tenant AND key_id = :key_id;

-- name: revoke_api_key
UPDATE api_keys SET revoked_at = :now, revoked_by = :by
WHERE tenant = :tenant AND key_id = :key_id AND revoked_at IS NULL;

-- name: api_key_to_authenticate
-- The one lookup not scoped by a tenant: it is how the tenant of a key is learnt. A key of a
-- tenant that no longer exists is not found.
SELECT k.key_id, k.tenant, k.principal, k.roles, k.secret_hash, k.created_at, k.created_by,
       k.expires_at, k.revoked_at, k.revoked_by, k.last_used_at,
       t.disabled_at AS tenant_disabled_at
FROM api_keys k JOIN tenants t ON t.tenant = k.tenant
WHERE k.key_id = :key_id;

-- name: touch_api_key
UPDATE api_keys SET last_used_at = :now
WHERE tenant = :tenant AND key_id = :key_id AND (last_used_at IS NULL OR last_used_at < :stale);

-- == signal waits by correlation, and webhook sources ==================================

-- name: insert_correlation
INSERT INTO correlations (tenant, run_id, step, signal, corr_key, corr_value, created_at)
VALUES (:tenant, :run_id, :step, :signal, :corr_key, :corr_value, :now)
ON CONFLICT DO NOTHING;

-- name: delete_correlation
DELETE FROM correlations WHERE tenant = :tenant AND run_id = :run_id AND step = :step;

-- name: delete_run_correlations
DELETE FROM correlations WHERE tenant = :tenant AND run_id = :run_id;

-- name: correlated_waits
-- The runs of a tenant waiting for `signal` with (key, value), oldest wait first.
SELECT run_id, step FROM correlations
WHERE tenant = :tenant AND corr_key = :corr_key AND corr_value = :corr_value AND signal = :signal
ORDER BY created_at, run_id, step
LIMIT :limit;

-- name: insert_webhook_source
INSERT INTO webhook_sources (tenant, source, url_id, signal, corr_key, corr_path, tolerance,
                             secret, created_at, created_by)
VALUES (:tenant, :source, :url_id, :signal, :corr_key, :corr_path, :tolerance,
        :secret, :now, :by)
ON CONFLICT DO NOTHING;

-- name: webhook_source_of_tenant
SELECT tenant, source, url_id, signal, corr_key, corr_path, tolerance, secret, created_at,
       created_by
FROM webhook_sources WHERE tenant = :tenant AND source = :source;

-- name: list_webhook_sources
SELECT tenant, source, url_id, signal, corr_key, corr_path, tolerance, secret, created_at,
       created_by
FROM webhook_sources WHERE tenant = :tenant
ORDER BY source;

-- name: delete_webhook_source
DELETE FROM webhook_sources WHERE tenant = :tenant AND source = :source;

-- name: delete_source_deliveries
DELETE FROM webhook_deliveries WHERE tenant = :tenant AND source = :source;

-- name: webhook_source_by_url_id
-- The one lookup not scoped by a tenant: the webhook's URL names only the source's
-- url_id, which is how its tenant is learnt. A disabled tenant's source is not found.
SELECT tenant, source, url_id, signal, corr_key, corr_path, tolerance, secret, created_at,
       created_by
FROM webhook_sources WHERE url_id = :url_id
  AND NOT EXISTS (SELECT 1 FROM tenants d WHERE d.tenant = webhook_sources.tenant
                    AND d.disabled_at IS NOT NULL);

-- name: reseal_webhook_secret
UPDATE webhook_sources SET secret = :new
WHERE tenant = :tenant AND source = :source AND secret = :old;

-- name: insert_webhook_delivery
INSERT INTO webhook_deliveries (tenant, source, delivery_id, received_at)
VALUES (:tenant, :source, :delivery_id, :now)
ON CONFLICT DO NOTHING;

-- name: webhook_delivery
SELECT outcome FROM webhook_deliveries
WHERE tenant = :tenant AND source = :source AND delivery_id = :delivery_id;

-- name: set_webhook_delivery_outcome
UPDATE webhook_deliveries SET outcome = :outcome
WHERE tenant = :tenant AND source = :source AND delivery_id = :delivery_id;

-- name: prune_webhook_deliveries
DELETE FROM webhook_deliveries
WHERE tenant = :tenant AND source = :source AND received_at < :before;

-- == quotas ==============================================================================

-- name: tenant_row
SELECT tenant, created_at, created_by, quotas, disabled_at, disabled_by FROM tenants
WHERE tenant = :tenant;

-- name: lock_tenant_row
SELECT tenant, created_at, created_by, quotas, disabled_at, disabled_by FROM tenants
WHERE tenant = :tenant
{for_update};

-- name: set_tenant_quotas
UPDATE tenants SET quotas = :quotas WHERE tenant = :tenant;

-- name: ensure_admission
INSERT INTO tenant_admission (tenant, tokens, refilled_at) VALUES (:tenant, :tokens, :now)
ON CONFLICT (tenant) DO NOTHING;

-- name: lock_admission
-- Every admission of a tenant (a start, a publish, a lease under a quota) takes this row
-- first, so their counts see each other's writes.
SELECT tokens, refilled_at FROM tenant_admission WHERE tenant = :tenant
{for_update};

-- name: set_admission
UPDATE tenant_admission SET tokens = :tokens, refilled_at = :refilled_at
WHERE tenant = :tenant;

-- name: count_active_runs
-- Counts stop at :limit: a count is needed only up to the quota it is compared with.
SELECT count(*) AS n FROM (
    SELECT 1 FROM runs WHERE tenant = :tenant AND status IN ('enqueued', 'running', 'waiting', 'paused', 'suspended')
    LIMIT :limit) counted;

-- name: count_leased_activities
SELECT count(*) AS n FROM (
    SELECT 1 FROM tasks WHERE tenant = :tenant AND kind = 'activity' AND state = 'leased'
    LIMIT :limit) counted;

-- name: count_pending_timers
SELECT count(*) AS n FROM (
    SELECT 1 FROM timers WHERE tenant = :tenant AND status = 'pending'
    LIMIT :limit) counted;

-- name: count_definitions
SELECT count(*) AS n FROM (
    SELECT 1 FROM definitions WHERE tenant = :tenant
    LIMIT :limit) counted;

-- name: count_schedules
SELECT count(*) AS n FROM (
    SELECT 1 FROM schedules WHERE tenant = :tenant
    LIMIT :limit) counted;

-- name: count_webhook_sources
SELECT count(*) AS n FROM (
    SELECT 1 FROM webhook_sources WHERE tenant = :tenant
    LIMIT :limit) counted;

-- name: count_queues
SELECT count(*) AS n FROM (
    SELECT 1 FROM queues WHERE tenant = :tenant
    LIMIT :limit) counted;

-- name: count_users
-- Users not disabled: a disabled one signs in no more.
SELECT count(*) AS n FROM (
    SELECT 1 FROM users WHERE tenant = :tenant AND disabled_at IS NULL
    LIMIT :limit) counted;

-- name: count_api_keys
-- Keys that still work: neither revoked nor expired.
SELECT count(*) AS n FROM (
    SELECT 1 FROM api_keys WHERE tenant = :tenant AND revoked_at IS NULL
      AND (expires_at IS NULL OR expires_at > :now)
    LIMIT :limit) counted;

-- == retention: purged runs =============================================================

-- name: purgeable_runs
-- The tenant's finished runs that finished before the cutoff, oldest first.
SELECT run_id AS run_id, workflow AS workflow, version AS version, status AS status,
       created_at AS created_at, finished_at AS finished_at, last_seq AS last_seq,
       last_hash AS last_hash
FROM runs
WHERE tenant = :tenant AND finished_at IS NOT NULL AND finished_at < :cutoff
  AND status IN ('completed', 'failed', 'cancelled', 'terminated')
ORDER BY finished_at, run_id
LIMIT :limit
{skip_locked};

-- name: count_purgeable
SELECT count(*) AS runs, coalesce(sum(last_seq), 0) AS events
FROM (SELECT last_seq FROM runs
      WHERE tenant = :tenant AND finished_at IS NOT NULL AND finished_at < :cutoff
        AND status IN ('completed', 'failed', 'cancelled', 'terminated')
      LIMIT :limit) AS old;

-- name: insert_purged_run
INSERT INTO purged_runs (tenant, run_id, workflow, version, status, created_at, finished_at,
                         last_seq, last_hash, purged_at, purged_by, reason)
VALUES (:tenant, :run_id, :workflow, :version, :status, :created_at, :finished_at,
        :last_seq, :last_hash, :now, :by, :reason)
ON CONFLICT (tenant, run_id) DO UPDATE SET
    workflow = excluded.workflow, version = excluded.version, status = excluded.status,
    created_at = excluded.created_at, finished_at = excluded.finished_at,
    last_seq = excluded.last_seq, last_hash = excluded.last_hash,
    purged_at = excluded.purged_at, purged_by = excluded.purged_by, reason = excluded.reason;

-- name: purge_run_row
DELETE FROM runs WHERE tenant = :tenant AND run_id = :run_id
  AND status IN ('completed', 'failed', 'cancelled', 'terminated');

-- name: purge_run_events
DELETE FROM events WHERE tenant = :tenant AND run_id = :run_id;

-- name: purge_run_tasks
DELETE FROM tasks WHERE tenant = :tenant AND run_id = :run_id;

-- name: purge_run_timers
DELETE FROM timers WHERE tenant = :tenant AND run_id = :run_id;

-- name: purge_run_correlations
DELETE FROM correlations WHERE tenant = :tenant AND run_id = :run_id;

-- name: run_approval_ids
SELECT approval_id AS approval_id FROM approvals WHERE tenant = :tenant AND run_id = :run_id;

-- name: purge_approval_credentials
DELETE FROM approval_credentials WHERE tenant = :tenant AND approval_id = :approval_id;

-- name: purge_approval_votes
DELETE FROM approval_votes WHERE tenant = :tenant AND approval_id = :approval_id;

-- name: purge_approval_refusals
DELETE FROM approval_refusals WHERE tenant = :tenant AND approval_id = :approval_id;

-- name: purge_approval_outbox
-- An approval's messages have ids that start with "<approval_id>:".
DELETE FROM outbox WHERE tenant = :tenant AND substr(id, 1, :prefix_len) = :prefix;

-- name: purge_approval
DELETE FROM approvals WHERE tenant = :tenant AND approval_id = :approval_id;

-- name: finished_run_tenants
-- The tenants that have finished runs, after `after` in order: one probe of
-- runs_by_finished per tenant (a loose index scan), however many runs each has.
WITH RECURSIVE t(tenant) AS (
    SELECT min(tenant) FROM runs WHERE finished_at IS NOT NULL AND tenant > :after
  UNION ALL
    SELECT (SELECT min(r.tenant) FROM runs r
            WHERE r.finished_at IS NOT NULL AND r.tenant > t.tenant)
    FROM t WHERE t.tenant IS NOT NULL
)
SELECT tenant AS tenant FROM t WHERE tenant IS NOT NULL
LIMIT :limit;

-- name: get_purged_run
SELECT tenant AS tenant, run_id AS run_id, workflow AS workflow, version AS version,
       status AS status, created_at AS created_at, finished_at AS finished_at,
       last_seq AS last_seq, last_hash AS last_hash, purged_at AS purged_at,
       purged_by AS purged_by, reason AS reason
FROM purged_runs WHERE tenant = :tenant AND run_id = :run_id;

-- name: list_purged_runs
SELECT tenant AS tenant, run_id AS run_id, workflow AS workflow, version AS version,
       status AS status, created_at AS created_at, finished_at AS finished_at,
       last_seq AS last_seq, last_hash AS last_hash, purged_at AS purged_at,
       purged_by AS purged_by, reason AS reason
FROM purged_runs WHERE tenant = :tenant
ORDER BY purged_at DESC, run_id DESC
LIMIT :limit;

-- == continue-as-new ====================================================================

-- name: continue_run_row
-- The run's next generation: the snapshot of a run that has just started, same id,
-- creation time and priority.
UPDATE runs SET input = :input, status = :status, result = NULL, error = NULL,
                input_mac = :input_mac, state_mac = :state_mac,
                waiting_for = '[]', last_seq = :last_seq, last_hash = :last_hash,
                processed_seq = 0, updated_at = :now, finished_at = NULL,
                history_bytes = :history_bytes, unread_signals = 0, signal_names = NULL
WHERE tenant = :tenant AND run_id = :run_id;

-- == payload encryption: re-encrypting stored payloads under the current key ==========
-- Each write is conditioned on the text read, so a value a commit replaced meanwhile
-- (under the current key already) is left as that commit wrote it.

-- name: run_ids_after
SELECT run_id FROM runs WHERE tenant = :tenant AND run_id > :after
ORDER BY run_id LIMIT :limit;

-- name: run_payloads
SELECT input, result, error FROM runs WHERE tenant = :tenant AND run_id = :run_id;

-- name: event_payloads
SELECT seq, data FROM events WHERE tenant = :tenant AND run_id = :run_id ORDER BY seq;

-- name: task_payloads
SELECT kind, step, spec, heartbeat_details FROM tasks
WHERE tenant = :tenant AND run_id = :run_id ORDER BY kind, step;

-- name: approval_payloads
SELECT approval_id, data FROM approvals
WHERE tenant = :tenant AND run_id = :run_id ORDER BY approval_id;

-- name: reseal_task_spec
UPDATE tasks SET spec = :new
WHERE tenant = :tenant AND run_id = :run_id AND kind = :kind AND step = :step
  AND spec = :old;

-- name: reseal_task_heartbeat_details
UPDATE tasks SET heartbeat_details = :new
WHERE tenant = :tenant AND run_id = :run_id AND kind = :kind AND step = :step
  AND heartbeat_details = :old;

-- name: reseal_run_input
UPDATE runs SET input = :new
WHERE tenant = :tenant AND run_id = :run_id AND input = :old;

-- name: reseal_run_result
UPDATE runs SET result = :new
WHERE tenant = :tenant AND run_id = :run_id AND result = :old;

-- name: reseal_run_error
UPDATE runs SET error = :new
WHERE tenant = :tenant AND run_id = :run_id AND error = :old;

-- name: reseal_event
UPDATE events SET data = :new
WHERE tenant = :tenant AND run_id = :run_id AND seq = :seq AND data = :old;

-- name: reseal_approval
UPDATE approvals SET data = :new
WHERE tenant = :tenant AND approval_id = :approval_id AND data = :old;

-- == legacy runs sealed: their history hashed again from their genesis, checks on rows ==
-- Each write is conditioned on what was read (the run's row is locked first).

-- name: rehash_event
UPDATE events SET hash = :new
WHERE tenant = :tenant AND run_id = :run_id AND seq = :seq AND hash = :old;

-- name: rehash_run_head
UPDATE runs SET last_hash = :new
WHERE tenant = :tenant AND run_id = :run_id AND last_seq = :last_seq AND last_hash = :old;

-- name: seal_run_row
UPDATE runs SET input_mac = :input_mac, state_mac = :state_mac
WHERE tenant = :tenant AND run_id = :run_id;

-- name: seal_approval_row
UPDATE approvals SET mac = :mac
WHERE tenant = :tenant AND approval_id = :approval_id AND mac IS NULL;

-- name: run_counts
-- Metrics: runs by tenant, workflow and status (one scan, read at most every few seconds).
SELECT tenant, workflow, status, count(*) AS runs FROM runs GROUP BY tenant, workflow, status;

-- name: queue_gauges
-- Metrics: tasks due and unclaimed, by tenant, queue and kind, and the oldest one's due time.
SELECT tenant, queue, kind, count(*) AS depth, min(visible_at) AS oldest_visible_at FROM tasks
WHERE state = 'ready' AND visible_at <= :now
GROUP BY tenant, queue, kind;

-- name: queue_running
-- Metrics: tasks leased (running), by tenant, queue and kind.
SELECT tenant, queue, kind, count(*) AS running FROM tasks
WHERE state = 'leased'
GROUP BY tenant, queue, kind;

-- name: named_queue_loads
-- Metrics: each named queue's attempts due and unclaimed, leased, and the oldest due.
SELECT tenant, named_queue AS queue,
       sum(CASE WHEN state = 'ready' AND visible_at <= :now THEN 1 ELSE 0 END) AS depth,
       sum(CASE WHEN state = 'leased' THEN 1 ELSE 0 END) AS running,
       min(CASE WHEN state = 'ready' AND visible_at <= :now THEN visible_at END)
           AS oldest_visible_at
FROM tasks WHERE kind = 'activity' AND state IN ('ready', 'leased')
GROUP BY tenant, named_queue;

-- == console users and sessions ========================================================

-- name: insert_user
INSERT INTO users (tenant, name, roles, password_hash, created_at, created_by,
                   password_changed_at)
VALUES (:tenant, :name, :roles, :password_hash, :now, :by, :now)
ON CONFLICT DO NOTHING;

-- name: get_user
SELECT tenant, name, roles, password_hash, created_at, created_by, disabled_at, disabled_by,
       password_changed_at, failed_sign_ins, locked_until
FROM users WHERE tenant = :tenant AND name = :name;

-- name: list_users
SELECT tenant, name, roles, password_hash, created_at, created_by, disabled_at, disabled_by,
       password_changed_at, failed_sign_ins, locked_until
FROM users WHERE tenant = :tenant ORDER BY name;

-- name: disable_user
UPDATE users SET disabled_at = :now, disabled_by = :by
WHERE tenant = :tenant AND name = :name AND disabled_at IS NULL;

-- name: set_password
UPDATE users SET password_hash = :password_hash, password_changed_at = :now,
                 failed_sign_ins = 0, locked_until = NULL
WHERE tenant = :tenant AND name = :name;

-- name: count_sign_in_failure
UPDATE users SET failed_sign_ins = failed_sign_ins + 1, locked_until = :locked_until
WHERE tenant = :tenant AND name = :name;

-- name: clear_sign_in_failures
UPDATE users SET failed_sign_ins = 0, locked_until = NULL
WHERE tenant = :tenant AND name = :name AND (failed_sign_ins <> 0 OR locked_until IS NOT NULL);

-- name: end_user_sessions
UPDATE console_sessions SET ended_at = :now
WHERE tenant = :tenant AND kind = 'password' AND credential = :name AND ended_at IS NULL;

-- name: insert_session
INSERT INTO console_sessions (token_hash, tenant, subject, kind, credential, created_at,
                              expires_at)
VALUES (:token_hash, :tenant, :subject, :kind, :credential, :now, :expires_at);

-- name: delete_expired_sessions
-- Sessions past their expiry are of no use, ended or not: forgotten when a new one opens.
DELETE FROM console_sessions WHERE expires_at < :now;

-- name: get_session
SELECT token_hash, tenant, subject, kind, credential, created_at, expires_at
FROM console_sessions WHERE token_hash = :token_hash AND ended_at IS NULL;

-- name: end_session
UPDATE console_sessions SET ended_at = :now WHERE token_hash = :token_hash AND ended_at IS NULL;

-- == sign-in attempts (counted before a password is checked) ==========================

-- name: forget_sign_in_attempts
DELETE FROM sign_in_attempts WHERE updated_at < :before;

-- name: insert_sign_in_attempt
INSERT INTO sign_in_attempts (tenant, user_name, address, failures, window_start, updated_at)
VALUES (:tenant, :user_name, :address, 0, :now, :now)
ON CONFLICT DO NOTHING;

-- name: lock_sign_in_attempt
SELECT failures, window_start, held_until FROM sign_in_attempts
WHERE tenant = :tenant AND user_name = :user_name AND address = :address
{for_update};

-- name: update_sign_in_attempt
UPDATE sign_in_attempts
SET failures = :failures, window_start = :window_start, held_until = :held_until,
    updated_at = :now
WHERE tenant = :tenant AND user_name = :user_name AND address = :address;

-- name: uncount_sign_in_attempt
-- An attempt that succeeded was counted as a failure when it was reserved.
UPDATE sign_in_attempts SET failures = failures - 1, updated_at = :now
WHERE tenant = :tenant AND user_name = :user_name AND address = :address AND failures > 0;

-- name: delete_sign_in_attempt
DELETE FROM sign_in_attempts
WHERE tenant = :tenant AND user_name = :user_name AND address = :address;

-- name: forget_user_sign_in_attempts
DELETE FROM sign_in_attempts WHERE tenant = :tenant AND user_name = :name;

-- == a tenant's lifecycle: disabled, enabled, deleted ==================================

-- name: disable_tenant
UPDATE tenants SET disabled_at = :now, disabled_by = :by
WHERE tenant = :tenant AND disabled_at IS NULL;

-- name: enable_tenant
UPDATE tenants SET disabled_at = NULL, disabled_by = NULL WHERE tenant = :tenant;

-- name: tenant_disabled_at
SELECT disabled_at FROM tenants WHERE tenant = :tenant;

-- name: delete_tenant_row
DELETE FROM tenants WHERE tenant = :tenant AND disabled_at IS NOT NULL;

-- Each of a disabled tenant's tables, a batch at a time (by primary key, so that a batch
-- is one index range however the table is kept).

-- name: delete_tenant_events
DELETE FROM events WHERE tenant = :tenant AND (tenant, run_id, seq) IN (
    SELECT tenant, run_id, seq FROM events WHERE tenant = :tenant LIMIT :limit);

-- name: delete_tenant_tasks
DELETE FROM tasks WHERE tenant = :tenant AND (tenant, run_id, kind, step) IN (
    SELECT tenant, run_id, kind, step FROM tasks WHERE tenant = :tenant LIMIT :limit);

-- name: delete_tenant_timers
DELETE FROM timers WHERE tenant = :tenant AND (tenant, run_id, step) IN (
    SELECT tenant, run_id, step FROM timers WHERE tenant = :tenant LIMIT :limit);

-- name: delete_tenant_correlations
DELETE FROM correlations WHERE tenant = :tenant AND (tenant, run_id, step) IN (
    SELECT tenant, run_id, step FROM correlations WHERE tenant = :tenant LIMIT :limit);

-- name: delete_tenant_approval_votes
DELETE FROM approval_votes WHERE tenant = :tenant AND (tenant, approval_id, principal) IN (
    SELECT tenant, approval_id, principal FROM approval_votes WHERE tenant = :tenant LIMIT :limit);

-- name: delete_tenant_approval_refusals
DELETE FROM approval_refusals WHERE tenant = :tenant AND (tenant, approval_id, principal, reason) IN (
    SELECT tenant, approval_id, principal, reason FROM approval_refusals WHERE tenant = :tenant LIMIT :limit);

-- name: delete_tenant_approval_credentials
DELETE FROM approval_credentials WHERE tenant = :tenant AND (tenant, credential_id) IN (
    SELECT tenant, credential_id FROM approval_credentials WHERE tenant = :tenant LIMIT :limit);

-- name: delete_tenant_approvals
DELETE FROM approvals WHERE tenant = :tenant AND (tenant, approval_id) IN (
    SELECT tenant, approval_id FROM approvals WHERE tenant = :tenant LIMIT :limit);

-- name: delete_tenant_runs
DELETE FROM runs WHERE tenant = :tenant AND (tenant, run_id) IN (
    SELECT tenant, run_id FROM runs WHERE tenant = :tenant LIMIT :limit);

-- name: delete_tenant_purged_runs
DELETE FROM purged_runs WHERE tenant = :tenant AND (tenant, run_id) IN (
    SELECT tenant, run_id FROM purged_runs WHERE tenant = :tenant LIMIT :limit);

-- name: delete_tenant_outbox
DELETE FROM outbox WHERE tenant = :tenant AND (id) IN (
    SELECT id FROM outbox WHERE tenant = :tenant LIMIT :limit);

-- name: delete_tenant_schedules
DELETE FROM schedules WHERE tenant = :tenant AND (tenant, schedule_id) IN (
    SELECT tenant, schedule_id FROM schedules WHERE tenant = :tenant LIMIT :limit);

-- name: delete_tenant_definitions
DELETE FROM definitions WHERE tenant = :tenant AND (tenant, name, version) IN (
    SELECT tenant, name, version FROM definitions WHERE tenant = :tenant LIMIT :limit);

-- name: delete_tenant_group_members
DELETE FROM group_members WHERE tenant = :tenant AND (tenant, group_name, principal) IN (
    SELECT tenant, group_name, principal FROM group_members WHERE tenant = :tenant LIMIT :limit);

-- name: delete_tenant_queues
DELETE FROM queues WHERE tenant = :tenant AND (tenant, name) IN (
    SELECT tenant, name FROM queues WHERE tenant = :tenant LIMIT :limit);

-- name: delete_tenant_webhook_deliveries
DELETE FROM webhook_deliveries WHERE tenant = :tenant AND (source, delivery_id) IN (
    SELECT source, delivery_id FROM webhook_deliveries WHERE tenant = :tenant LIMIT :limit);

-- name: delete_tenant_webhook_sources
DELETE FROM webhook_sources WHERE tenant = :tenant AND (source) IN (
    SELECT source FROM webhook_sources WHERE tenant = :tenant LIMIT :limit);

-- name: delete_tenant_console_sessions
DELETE FROM console_sessions WHERE tenant = :tenant AND (token_hash) IN (
    SELECT token_hash FROM console_sessions WHERE tenant = :tenant LIMIT :limit);

-- name: delete_tenant_users
DELETE FROM users WHERE tenant = :tenant AND (tenant, name) IN (
    SELECT tenant, name FROM users WHERE tenant = :tenant LIMIT :limit);

-- name: delete_tenant_api_keys
DELETE FROM api_keys WHERE tenant = :tenant AND (key_id) IN (
    SELECT key_id FROM api_keys WHERE tenant = :tenant LIMIT :limit);

-- name: delete_tenant_sign_in_attempts
DELETE FROM sign_in_attempts WHERE tenant = :tenant AND (tenant, user_name, address) IN (
    SELECT tenant, user_name, address FROM sign_in_attempts WHERE tenant = :tenant LIMIT :limit);

-- name: delete_tenant_tenant_admission
DELETE FROM tenant_admission WHERE tenant = :tenant;

-- == pages of runs: versions, search, counts ===========================================

-- name: outlook_tasks
-- What is in motion for some runs of a tenant (`run_ids`: a JSON array): their tasks
-- with their state, and their pending approvals.
SELECT run_id, kind, step, queue, state, visible_at, owner, attempt, deadline
FROM tasks WHERE tenant = :tenant AND run_id {in_run_ids};

-- name: outlook_approvals
SELECT {approval_columns}
FROM approvals WHERE tenant = :tenant AND run_id {in_run_ids} AND status = 'pending';

-- name: count_runs
-- The tenant's runs by status, read from the status index alone.
SELECT status, count(*) AS runs FROM runs WHERE tenant = :tenant GROUP BY status;

-- name: search_run_size_by_id
SELECT run_id, created_at, {run_size} AS size
FROM runs WHERE tenant = :tenant AND run_id = :text;

-- name: search_run_sizes_by_correlation
-- Runs waiting with the text as a correlation value, or as `key=value`.
SELECT run_id, created_at, {run_size} AS size
FROM runs
WHERE tenant = :tenant AND run_id IN (
    SELECT c.run_id FROM correlations c
    WHERE c.tenant = :tenant
      AND (c.corr_value = :text OR c.corr_key || '=' || c.corr_value = :text)
)
ORDER BY created_at DESC, run_id DESC
LIMIT :limit;

-- name: set_run_parent
-- A child run's link to the run that started it (and the step), and its close policy.
UPDATE runs SET parent_run_id = :parent_run_id, parent_step = :parent_step, parent_close = :parent_close
WHERE tenant = :tenant AND run_id = :run_id;

-- name: run_parent
SELECT parent_run_id, parent_step, parent_close, parent_told, status, processed_seq FROM runs
WHERE tenant = :tenant AND run_id = :run_id;

-- name: run_children
-- A run's children, oldest first (the index on the parent finds them).
SELECT run_id, workflow, version, status, parent_step, parent_close, processed_seq FROM runs
WHERE tenant = :tenant AND parent_run_id = :run_id
ORDER BY created_at, run_id
LIMIT :limit;

-- name: parent_told
-- The parent has been told of the child's end: it is never told again.
UPDATE runs SET parent_told = 1 WHERE tenant = :tenant AND run_id = :run_id;

-- == schedules ===========================================================================

-- name: insert_schedule
INSERT INTO schedules (tenant, schedule_id, workflow, version, cron, tz, every, input,
    overlap, catchup, catchup_window, paused, next_fire_at, last_fire_at, last_run_id,
    buffered_fire_at, created_at, created_by)
VALUES (:tenant, :schedule_id, :workflow, :version, :cron, :tz, :every, :input,
    :overlap, :catchup, :catchup_window, :paused, :next_fire_at, :last_fire_at, :last_run_id,
    :buffered_fire_at, :created_at, :created_by)
ON CONFLICT (tenant, schedule_id) DO NOTHING;

-- name: get_schedule
SELECT * FROM schedules WHERE tenant = :tenant AND schedule_id = :schedule_id;

-- name: list_schedules
SELECT * FROM schedules WHERE tenant = :tenant ORDER BY schedule_id;

-- name: delete_schedule
DELETE FROM schedules WHERE tenant = :tenant AND schedule_id = :schedule_id;

-- name: pause_schedule
UPDATE schedules SET paused = 1, buffered_fire_at = NULL, changed_at = :now, changed_by = :by
WHERE tenant = :tenant AND schedule_id = :schedule_id;

-- name: resume_schedule
UPDATE schedules SET paused = 0, next_fire_at = :next_fire_at, changed_at = :now,
    changed_by = :by
WHERE tenant = :tenant AND schedule_id = :schedule_id;

-- name: due_schedules
SELECT * FROM schedules
WHERE paused = 0 AND (next_fire_at <= :now OR buffered_fire_at IS NOT NULL)
  AND NOT EXISTS (SELECT 1 FROM tenants d WHERE d.tenant = schedules.tenant AND d.disabled_at IS NOT NULL)
ORDER BY next_fire_at
LIMIT :limit;

-- name: schedule_inputs
SELECT schedule_id, input FROM schedules WHERE tenant = :tenant ORDER BY schedule_id;

-- name: reseal_schedule_input
UPDATE schedules SET input = :new
WHERE tenant = :tenant AND schedule_id = :schedule_id AND input = :old;

-- name: schedule_counts
-- Metrics: schedules by tenant and state (read at most every few seconds).
SELECT tenant,
       CASE WHEN paused = 1 THEN 'paused'
            WHEN buffered_fire_at IS NOT NULL THEN 'buffered'
            ELSE 'active' END AS state,
       count(*) AS schedules
FROM schedules
GROUP BY tenant, state;

-- name: advance_schedule
UPDATE schedules SET next_fire_at = :next_fire_at, last_fire_at = :last_fire_at,
    last_run_id = :last_run_id, buffered_fire_at = :buffered_fire_at
WHERE tenant = :tenant AND schedule_id = :schedule_id AND paused = 0
    AND next_fire_at = :seen;

-- name: advance_schedule_unset
UPDATE schedules SET next_fire_at = :next_fire_at, last_fire_at = :last_fire_at,
    last_run_id = :last_run_id, buffered_fire_at = :buffered_fire_at
WHERE tenant = :tenant AND schedule_id = :schedule_id AND paused = 0
    AND next_fire_at IS NULL;

-- == named queues ======================================================================

-- name: lock_queue
-- A claim from a limited queue takes its row first, so the claims of every engine count
-- each other's leases and draw from one bucket.
SELECT tenant, name, concurrency, key_concurrency, worker_concurrency, rate_count, rate_period,
       tokens, refilled_at, updated_at, updated_by
FROM queues WHERE tenant = :tenant AND name = :name
{for_update};

-- name: queue_row
SELECT tenant, name, concurrency, key_concurrency, worker_concurrency, rate_count, rate_period,
       tokens, refilled_at, updated_at, updated_by
FROM queues WHERE tenant = :tenant AND name = :name;

-- name: queue_rows
SELECT tenant, name, concurrency, key_concurrency, worker_concurrency, rate_count, rate_period,
       tokens, refilled_at, updated_at, updated_by
FROM queues WHERE tenant = :tenant ORDER BY name;

-- name: take_queue_tokens
UPDATE queues SET tokens = :tokens, refilled_at = :refilled_at
WHERE tenant = :tenant AND name = :name;

-- name: upsert_queue
INSERT INTO queues (tenant, name, concurrency, key_concurrency, worker_concurrency, rate_count,
                    rate_period, tokens, refilled_at, updated_at, updated_by)
VALUES (:tenant, :name, :concurrency, :key_concurrency, :worker_concurrency, :rate_count,
        :rate_period, :tokens, :refilled_at, :now, :by)
ON CONFLICT (tenant, name) DO UPDATE SET
    concurrency = excluded.concurrency, key_concurrency = excluded.key_concurrency,
    worker_concurrency = excluded.worker_concurrency,
    rate_count = excluded.rate_count,
    rate_period = excluded.rate_period, tokens = excluded.tokens,
    refilled_at = excluded.refilled_at, updated_at = excluded.updated_at,
    updated_by = excluded.updated_by;

-- name: count_leased_in_queue
SELECT count(*) AS n FROM (
    SELECT 1 FROM tasks WHERE tenant = :tenant AND kind = 'activity' AND named_queue = :name
      AND state = 'leased'
    LIMIT :limit) counted;

-- name: queue_usage
-- What waits in each named queue of a tenant and what runs: one row per queue with tasks.
SELECT named_queue AS name,
       sum(CASE WHEN state = 'ready' THEN 1 ELSE 0 END) AS depth,
       sum(CASE WHEN state = 'leased' THEN 1 ELSE 0 END) AS running,
       min(CASE WHEN state = 'ready' AND visible_at <= :now THEN visible_at END) AS oldest_ready
FROM tasks WHERE tenant = :tenant AND kind = 'activity'
GROUP BY named_queue ORDER BY named_queue;

-- name: count_leased_in_queue_by_owner
-- What one engine holds of a queue (its per-worker limit).
SELECT count(*) AS n FROM (
    SELECT 1 FROM tasks WHERE tenant = :tenant AND kind = 'activity' AND named_queue = :name
      AND state = 'leased' AND owner = :owner
    LIMIT :limit) counted;

-- == workflow queues ===================================================================

-- name: count_admitted_in_queue
-- A workflow queue's runs admitted and not finished: what its concurrency counts.
SELECT count(*) AS n FROM (
    SELECT 1 FROM runs WHERE tenant = :tenant AND named_queue = :name
      AND status IN ('running', 'waiting', 'paused', 'suspended')
    LIMIT :limit) counted;

-- name: enqueued_runs
-- The next runs of a workflow queue to admit: by priority, then oldest first.
SELECT run_id FROM runs
WHERE tenant = :tenant AND named_queue = :name AND status = 'enqueued'
ORDER BY priority DESC, created_at, run_id
LIMIT :limit;

-- name: enqueued_runs_by_key
-- As enqueued_runs, where at most :per_key runs of one concurrency key are admitted at
-- once: the n-th enqueued run of a key is taken only if n more than the key's admitted
-- runs stays within :per_key.
SELECT run_id FROM (
    SELECT r.run_id, r.priority, r.created_at, r.concurrency_key,
           row_number() OVER (PARTITION BY r.concurrency_key
                              ORDER BY r.priority DESC, r.created_at, r.run_id) AS nth
    FROM runs r
    WHERE r.tenant = :tenant AND r.named_queue = :name AND r.status = 'enqueued') ranked
WHERE concurrency_key IS NULL
   OR nth + (SELECT count(*) FROM runs h
             WHERE h.tenant = :tenant AND h.named_queue = :name
               AND h.status IN ('running', 'waiting', 'paused', 'suspended')
               AND h.concurrency_key = ranked.concurrency_key) <= :per_key
ORDER BY priority DESC, created_at, run_id
LIMIT :limit;

-- name: admit_run
-- Only a run whose check says it is enqueued (or a legacy row without one, where such
-- rows are accepted): a status edited to 'enqueued' is not made good by admitting it.
UPDATE runs SET status = 'running', updated_at = :now, state_mac = :state_mac
WHERE tenant = :tenant AND run_id = :run_id AND status = 'enqueued'
  AND (state_mac = :enqueued_mac OR (state_mac IS NULL AND :legacy = 1));

-- name: release_held_task
-- An admitted run's workflow task, held while it was enqueued, is claimable now.
UPDATE tasks SET state = 'ready', visible_at = :now
WHERE tenant = :tenant AND run_id = :run_id AND kind = 'workflow' AND step = ''
  AND state = 'held';

-- name: lease_admitted_task
-- The engine that started a run admitted at once takes its workflow task.
UPDATE tasks SET state = 'leased', owner = :owner, fence = fence + 1, visible_at = :lease_until,
                 started_at = :now
WHERE tenant = :tenant AND run_id = :run_id AND kind = 'workflow' AND step = ''
  AND state = 'ready'
RETURNING fence;

-- name: queues_with_enqueued
-- The workflow queues with runs waiting for admission, by tenant and name.
SELECT DISTINCT tenant, named_queue AS name FROM runs
WHERE status = 'enqueued' AND named_queue IS NOT NULL
ORDER BY tenant, name
LIMIT :limit;

-- name: workflow_queue_usage
-- What each workflow queue of a tenant holds: runs enqueued and runs admitted.
SELECT named_queue AS name,
       sum(CASE WHEN status = 'enqueued' THEN 1 ELSE 0 END) AS depth,
       sum(CASE WHEN status <> 'enqueued' THEN 1 ELSE 0 END) AS running,
       min(CASE WHEN status = 'enqueued' THEN created_at END) AS oldest_ready
FROM runs
WHERE tenant = :tenant AND named_queue IS NOT NULL
  AND status IN ('enqueued', 'running', 'waiting', 'paused', 'suspended')
GROUP BY named_queue ORDER BY named_queue;

-- == identities ==========================================================================
-- What a name is already in a tenant, before a tenant admin makes a credential for it.

-- name: identity_as_user
SELECT name FROM users WHERE tenant = :tenant AND name = :name;

-- name: identity_as_key
SELECT key_id FROM api_keys WHERE tenant = :tenant AND principal = :name LIMIT 1;

-- name: identity_as_member
SELECT group_name FROM group_members
WHERE tenant = :tenant AND principal = :name
ORDER BY group_name
LIMIT 1;
