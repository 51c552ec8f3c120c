-- A run's step as one statement (PostgreSQL only; see store/transactions/step.py).
--
-- The commit of most steps has one shape: an attempt's result recorded, the run's
-- workflow task checked, the head and snapshot advanced, the events appended and the next
-- attempts leased to the engine that made the decision. `commit_run` runs that as five
-- statements, each a round trip; this runs it as one. Its conditions are those of
-- `commit_run`: the attempt's task is the one leased under `act_fence`; the workflow task
-- is held under `wf_fence`, idle and without lapses (otherwise `commit_run` would write
-- it); the head is at `expect_seq`/`expect_hash` and the events keep the run within its
-- `max_bytes` (if the commit carries one); no queue of a new attempt has a limit
-- (otherwise that attempt would wait for a claim). The rows it checks are locked first;
-- every write depends on all the conditions (`ok`), so when one fails nothing is written
-- and `commit_run` runs the request the long way, which names the conflict.
-- What both statements hold is written once, as a part (`-- part: x`, put in as `{x}`).

-- part: leased_attempt
-- The attempt's task, leased under `act_fence`.
tenant = %(tenant)s AND run_id = %(run_id)s AND kind = 'activity'
      AND step = %(act_step)s AND fence = %(act_fence)s AND state = 'leased'

-- part: new_head
-- The run's head and snapshot as the step leaves them (the columns every step sets).
last_seq = %(last_seq)s, last_hash = %(last_hash)s, updated_at = %(now)s,
                    status = %(status)s, waiting_for = %(waiting_for)s,
                    processed_seq = %(processed_seq)s, result = %(result)s, error = %(error)s,
                    state_mac = %(state_mac)s,

-- part: at_expected_head
-- The run, while its head is at `expect_seq`/`expect_hash` and every condition holds.
tenant = %(tenant)s AND run_id = %(run_id)s AND last_seq = %(expect_seq)s
      AND last_hash = %(expect_hash)s AND EXISTS (SELECT 1 FROM ok)

-- part: append_events
-- The step's events appended, when every condition holds.
INSERT INTO events (tenant, run_id, seq, type, data, ts, hash)
    SELECT %(tenant)s, %(run_id)s, e.seq, e.type, e.data, e.ts, e.hash
    FROM json_to_recordset(%(events)s::json)
         AS e(seq bigint, type text, data text, ts double precision, hash text)
    WHERE EXISTS (SELECT 1 FROM ok)
    RETURNING 1

-- name: commit_step
WITH act AS (
    SELECT 1 FROM tasks
    WHERE {leased_attempt}
    FOR UPDATE
), wt AS (
    SELECT fence, state, lapses, queue FROM tasks
    WHERE tenant = %(tenant)s AND run_id = %(run_id)s AND kind = 'workflow' AND step = ''
    FOR UPDATE
), head AS (
    SELECT priority, concurrency_key, history_bytes FROM runs
    WHERE tenant = %(tenant)s AND run_id = %(run_id)s
      AND last_seq = %(expect_seq)s AND last_hash = %(expect_hash)s
    FOR UPDATE
), ok AS (
    SELECT head.priority, head.concurrency_key FROM head
    WHERE EXISTS (SELECT 1 FROM act)
      AND (%(max_bytes)s::bigint IS NULL
           OR head.history_bytes + %(added_bytes)s <= %(max_bytes)s::bigint)
      AND EXISTS (SELECT 1 FROM wt WHERE wt.fence = %(wf_fence)s AND wt.state = 'idle'
                  AND wt.lapses = 0)
      AND NOT EXISTS (
          SELECT 1 FROM queues q
          WHERE q.tenant = %(tenant)s
            AND q.name IN (SELECT t.named_queue
                           FROM json_to_recordset(%(tasks)s::json) AS t(named_queue text))
            AND (q.concurrency IS NOT NULL OR q.rate_count IS NOT NULL
                 OR q.key_concurrency IS NOT NULL OR q.worker_concurrency IS NOT NULL))
), fin AS (
    DELETE FROM tasks
    WHERE {leased_attempt}
      AND EXISTS (SELECT 1 FROM ok)
    RETURNING 1
), adv AS (
    UPDATE runs SET {new_head}
                    finished_at = NULL, history_bytes = history_bytes + %(added_bytes)s,
                    unread_signals = coalesce(%(unread_signals)s, unread_signals),
                    signal_names = CASE WHEN %(names_known)s = 1 THEN %(signal_names)s
                                        ELSE signal_names END
    WHERE {at_expected_head}
    RETURNING 1
), ev AS (
    {append_events}
), nt AS (
    INSERT INTO tasks (tenant, run_id, kind, step, queue, state, visible_at, owner, fence,
                       attempt, started_at, deadline, heartbeat_deadline, timeout,
                       heartbeat_timeout, spec, created_at, priority, named_queue,
                       concurrency_key)
    SELECT %(tenant)s, %(run_id)s, 'activity', t.step, t.queue, 'leased', t.visible_at,
           t.owner, 1, t.attempt, %(now)s, t.deadline, t.heartbeat_deadline, t.timeout,
           t.heartbeat_timeout, t.spec, %(now)s, ok.priority, t.named_queue,
           ok.concurrency_key
    FROM ok, json_to_recordset(%(tasks)s::json)
         AS t(step text, queue text, visible_at double precision, attempt integer,
              deadline double precision, heartbeat_deadline double precision,
              timeout double precision, heartbeat_timeout double precision, spec text,
              named_queue text, owner text)
    RETURNING 1
)
SELECT (SELECT count(*) FROM ok) AS ok,
       (SELECT count(*) FROM fin) AS finished,
       (SELECT count(*) FROM adv) AS advanced,
       (SELECT count(*) FROM ev) AS appended,
       (SELECT count(*) FROM nt) AS leased,
       (SELECT queue FROM wt) AS queue;

-- name: finish_step
-- A run's last step: its result (if an attempt's) recorded, the head and the finished
-- snapshot written, the events appended, and the run's tasks, timers and correlated
-- signal waits removed. Only for a run with no parent to tell, no children to close and
-- no workflow queue to admit the next run of; otherwise nothing is written here.
WITH act AS (
    SELECT 1 FROM tasks
    WHERE {leased_attempt}
    FOR UPDATE
), wt AS (
    SELECT fence, queue FROM tasks
    WHERE tenant = %(tenant)s AND run_id = %(run_id)s AND kind = 'workflow' AND step = ''
    FOR UPDATE
), head AS (
    SELECT history_bytes FROM runs
    WHERE tenant = %(tenant)s AND run_id = %(run_id)s
      AND last_seq = %(expect_seq)s AND last_hash = %(expect_hash)s
      AND parent_run_id IS NULL AND named_queue IS NULL
    FOR UPDATE
), ok AS (
    SELECT 1 FROM head
    WHERE (%(act_step)s::text IS NULL OR EXISTS (SELECT 1 FROM act))
      AND (%(max_bytes)s::bigint IS NULL
           OR head.history_bytes + %(added_bytes)s <= %(max_bytes)s::bigint)
      AND EXISTS (SELECT 1 FROM wt WHERE wt.fence = %(wf_fence)s)
      AND NOT EXISTS (SELECT 1 FROM runs child
                      WHERE child.tenant = %(tenant)s AND child.parent_run_id = %(run_id)s)
), adv AS (
    UPDATE runs SET {new_head}
                    finished_at = %(now)s, history_bytes = history_bytes + %(added_bytes)s
    WHERE {at_expected_head}
    RETURNING 1
), ev AS (
    {append_events}
), gone_tasks AS (
    DELETE FROM tasks
    WHERE tenant = %(tenant)s AND run_id = %(run_id)s AND EXISTS (SELECT 1 FROM ok)
    RETURNING 1
), gone_timers AS (
    DELETE FROM timers
    WHERE tenant = %(tenant)s AND run_id = %(run_id)s AND EXISTS (SELECT 1 FROM ok)
    RETURNING 1
), gone_waits AS (
    DELETE FROM correlations
    WHERE tenant = %(tenant)s AND run_id = %(run_id)s AND EXISTS (SELECT 1 FROM ok)
    RETURNING 1
)
SELECT (SELECT count(*) FROM ok) AS ok,
       (SELECT count(*) FROM adv) AS advanced,
       (SELECT count(*) FROM ev) AS appended,
       (SELECT count(*) FROM gone_tasks) AS removed,
       (SELECT queue FROM wt) AS queue;
