-- job_rescue_past_deadline: running jobs past deadline_at (plus a grace period, so the
-- worker that runs them can stop them first) go back to retryable, or failed on their
-- last attempt. run_lease is bumped to fence the overdue attempt.
-- Scans jobs_running_idx: running jobs are few (bounded by the fleet's permits).
-- Fenced: does nothing unless the given epoch is still the leader lease's (ADR 0019).
WITH overdue AS (
    SELECT id FROM awa.jobs
    WHERE state = 'running' AND deadline_at IS NOT NULL
      AND deadline_at < now() - %(grace_ms)s::bigint * interval '1 millisecond'
      AND (SELECT awa.leader_holds(%(epoch)s::bigint))
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), rescued AS (
    UPDATE awa.jobs AS j
    SET state = CASE WHEN j.attempt >= j.max_attempts THEN 'failed' ELSE 'retryable' END::awa.job_state,
        finalized_at = CASE WHEN j.attempt >= j.max_attempts THEN now() END,
        run_at = now(),
        run_lease = j.run_lease + 1,
        heartbeat_at = NULL,
        callback_id = NULL, callback_timeout_at = NULL,  -- the lost attempt's callback ends with it
        errors = awa.errors_append(j.errors, jsonb_build_array(jsonb_build_object(
            'error', 'rescued: deadline passed at ' || j.deadline_at::text,
            'attempt', j.attempt, 'at', now(), 'type', 'DeadlineExceeded')))
    FROM overdue
    WHERE j.id = overdue.id
    RETURNING j.id, j.queue, j.kind, j.state
)
-- Their slots of capped queues are announced free (migration 0024).
SELECT r.id, r.queue, r.kind, r.state
FROM rescued AS r
CROSS JOIN (SELECT awa.announce_freed_in(array_agg(DISTINCT r2.queue)) FROM rescued AS r2) AS freed
