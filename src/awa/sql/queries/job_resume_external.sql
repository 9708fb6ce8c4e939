-- job_resume_external: an external system answers a callback and the job goes on.
-- * The job is running (its handler waits in job.wait_for_callback, or has not started
--   waiting yet): it stays running under the same attempt; the waiting handler returns
--   the payload. The worker is told on awa_control, so it does not wait for its poll.
-- * The job was parked by returning WaitForCallback (waiting_external): no handler waits,
--   so it becomes available (partition_key NULL: its queue's claim adopts it again, at
--   its original_priority: a new wait ages afresh) and runs again, the payload in
--   metadata.callback_payload, as the same attempt (given back here, counted again by
--   the claim).
-- The callback id is cleared either way (it resolves once); the payload replaces
-- metadata.callback_payload (JSON null when none was given). Expects jobs_callback_idx.
WITH resumed AS (
    UPDATE awa.jobs
    SET state = CASE WHEN state = 'running' THEN 'running' ELSE 'available' END::awa.job_state,
        run_at = CASE WHEN state = 'running' THEN run_at ELSE now() END,
        priority = CASE WHEN state = 'running' THEN priority ELSE original_priority END,
        partition_key = CASE WHEN state = 'running' THEN partition_key END,
        heartbeat_at = CASE WHEN state = 'running' THEN heartbeat_at END,
        -- A parked attempt goes on: its next claim counts the same attempt again, so a
        -- park-and-resume spends none (each spent one: attempt 4 of max_attempts 2
        -- after three resumes, and no retry left for an error after the first).
        attempt = CASE WHEN state = 'running' THEN attempt ELSE greatest(attempt - 1, 0) END,
        callback_id = NULL, callback_timeout_at = NULL,
        metadata = metadata || jsonb_build_object(
            'callback_payload', coalesce(%(payload)s::jsonb, 'null'::jsonb))
    WHERE callback_id = %(callback_id)s::uuid AND (state = 'waiting_external'
    OR (state = 'running' AND callback_lease = run_lease))
  AND (callback_timeout_at IS NULL OR callback_timeout_at > now())  -- not timed out
    RETURNING *
)
SELECT r.*,
    CASE WHEN r.state = 'running'
        THEN pg_notify('awa_control', json_build_object('resumed', r.id)::text)
        ELSE pg_notify('awa_available', r.queue) END AS notified
FROM resumed AS r
