-- job_complete_external: an external system reports success for a callback id. The job
-- completes when it is parked in waiting_external, or still running the attempt that
-- registered the id (the callback can arrive before the handler returns; that attempt's
-- own outcome is then fenced, since the row is no longer running). The payload, when
-- given, is kept in metadata.callback_payload. Expects jobs_callback_idx.
WITH ended AS (
    UPDATE awa.jobs
    SET state = 'completed', finalized_at = now(), heartbeat_at = NULL, progress = NULL,
        callback_id = NULL, callback_timeout_at = NULL,
        metadata = CASE WHEN %(payload)s::jsonb IS NULL THEN metadata
            ELSE metadata || jsonb_build_object('callback_payload', %(payload)s::jsonb) END
    WHERE callback_id = %(callback_id)s::uuid AND (state = 'waiting_external'
        OR (state = 'running' AND callback_lease = run_lease))
      AND (callback_timeout_at IS NULL OR callback_timeout_at > now())  -- not timed out
    RETURNING *
)
-- Wakes a handler waiting for this callback inside its attempt (the notice a resume
-- sends): it reads the row and raises CallbackEnded at once, not at its next poll.
SELECT e.*, pg_notify('awa_control', json_build_object('resumed', e.id)::text) AS notified
FROM ended AS e
