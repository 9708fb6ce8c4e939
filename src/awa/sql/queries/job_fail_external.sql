-- job_fail_external: an external system reports failure for a callback id: the job fails
-- now, whatever attempts it has left (and moves to the DLQ if its queue has one).
UPDATE awa.jobs
SET state = 'failed', finalized_at = now(), heartbeat_at = NULL,
    callback_id = NULL, callback_timeout_at = NULL,
    errors = awa.errors_append(errors, jsonb_build_array(jsonb_build_object(
        'error', %(error)s::text, 'attempt', attempt, 'at', now(), 'type', 'ExternalFailure')))
WHERE callback_id = %(callback_id)s::uuid AND (state = 'waiting_external'
    OR (state = 'running' AND callback_lease = run_lease))
  AND (callback_timeout_at IS NULL OR callback_timeout_at > now())  -- not timed out
RETURNING *
