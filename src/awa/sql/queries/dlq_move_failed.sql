-- dlq_move_failed: an operator moves failed jobs into the dead letter queue by id, kind
-- and/or queue — also on queues without dlq=True, whose failed jobs otherwise stay in
-- awa.jobs until retention. One statement: a job is in exactly one table at any time.
-- The reason is the operator's, else the job's last error. The caller refuses an empty
-- filter unless allow_all. Expects jobs_failed_kind_idx / jobs_finished_idx.
-- Locked in id order first, as job_retry_failed (ADR 0050).
WITH doomed AS (
    SELECT id FROM awa.jobs
    WHERE state = 'failed'
      AND (%(ids)s::bigint[] IS NULL OR id = ANY(%(ids)s::bigint[]))
      AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
      AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
    ORDER BY id
    FOR UPDATE
), moved AS (
    DELETE FROM awa.jobs
    WHERE state = 'failed'
      AND (%(ids)s::bigint[] IS NULL OR id = ANY(%(ids)s::bigint[]))
      AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
      AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
      AND (SELECT count(*) FROM doomed) >= 0  -- a gate the delete passes once
    RETURNING *
)
INSERT INTO awa.dlq (
    id, kind, queue, args, state, priority, original_priority, attempt, max_attempts,
    run_lease, tags, metadata, progress, errors, created_at, run_at, attempted_at,
    heartbeat_at, deadline_at, finalized_at, unique_key, unique_states, callback_id,
    callback_timeout_at, reason, dlq_at, ordering_key
)
SELECT id, kind, queue, args, state, priority, original_priority, attempt, max_attempts,
    run_lease, tags, metadata, progress, errors, created_at, run_at, attempted_at,
    heartbeat_at, deadline_at, finalized_at, unique_key, unique_states, NULL, NULL,
    coalesce(%(reason)s::text, errors -> -1 ->> 'error', 'failed'), now(), ordering_key
FROM moved
ORDER BY id
RETURNING id
