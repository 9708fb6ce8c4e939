-- job_fail_external: an external system reports failure for a callback id: the job fails
-- now, whatever attempts it has left (and moves to the DLQ if its queue has one).
WITH ended AS (
    UPDATE awa.jobs
    SET state = 'failed', finalized_at = now(), heartbeat_at = NULL,
        callback_id = NULL, callback_timeout_at = NULL,
        errors = awa.errors_append(errors, jsonb_build_array(jsonb_build_object(
            'error', %(error)s::text, 'attempt', attempt, 'at', now(), 'type', 'ExternalFailure')))
    WHERE callback_id = %(callback_id)s::uuid AND (state = 'waiting_external'
        OR (state = 'running' AND callback_lease = run_lease))
      AND (callback_timeout_at IS NULL OR callback_timeout_at > now())  -- not timed out
    RETURNING *
)
-- Wakes a handler waiting for this callback inside its attempt (the notice a resume
-- sends): it reads the row and raises CallbackEnded at once, not at its next poll.
SELECT e.*, pg_notify('awa_control', json_build_object('resumed', e.id)::text) AS notified
FROM ended AS e
