-- job_rescue_callback_timeout: parked jobs whose callback did not come in time go back to
-- retryable (due now), or to failed on their last attempt. The callback id is cleared, so
-- a late callback gets CallbackNotFound instead of finishing a job that moved on.
-- Run by the maintenance leader. Expects jobs_waiting_external_idx.
-- Fenced: does nothing unless the given epoch is still the leader lease's (ADR 0019).
WITH expired AS (
    SELECT id FROM awa.jobs
    WHERE state = 'waiting_external' AND callback_timeout_at < now()
      AND (SELECT awa.leader_holds(%(epoch)s::bigint))
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE awa.jobs AS j
SET state = CASE WHEN j.attempt >= j.max_attempts THEN 'failed' ELSE 'retryable' END::awa.job_state,
    finalized_at = CASE WHEN j.attempt >= j.max_attempts THEN now() END,
    run_at = now(),
    callback_id = NULL,
    callback_timeout_at = NULL,
    errors = awa.errors_append(j.errors, jsonb_build_array(jsonb_build_object(
        'error', 'callback timed out at ' || j.callback_timeout_at::text,
        'attempt', j.attempt, 'at', now(), 'type', 'CallbackTimeout')))
FROM expired
WHERE j.id = expired.id
RETURNING j.id, j.queue, j.kind, j.state
