-- job_complete_external: an external system reports success for a callback id. The job
-- completes when it is parked in waiting_external, or still running the attempt that
-- registered the id (the callback can arrive before the handler returns; that attempt's
-- own outcome is then fenced, since the row is no longer running). The payload, when
-- given, is kept in metadata.callback_payload. Expects jobs_callback_idx.
UPDATE awa.jobs
SET state = 'completed', finalized_at = now(), heartbeat_at = NULL, progress = NULL,
    callback_id = NULL, callback_timeout_at = NULL,
    metadata = CASE WHEN %(payload)s::jsonb IS NULL THEN metadata
        ELSE metadata || jsonb_build_object('callback_payload', %(payload)s::jsonb) END
WHERE callback_id = %(callback_id)s::uuid AND (state = 'waiting_external'
    OR (state = 'running' AND callback_lease = run_lease))
  AND (callback_timeout_at IS NULL OR callback_timeout_at > now())  -- not timed out
RETURNING *
