-- job_retry_external: an external system asks for the job to run again now. An exhausted
-- attempt budget is widened by one so the retry can run; it waits at its original_priority
-- (a new wait ages afresh); the queue is woken.
WITH retried AS (
    UPDATE awa.jobs
    SET state = 'available', run_at = now(), partition_key = NULL, heartbeat_at = NULL,
        priority = original_priority,
        callback_id = NULL, callback_timeout_at = NULL,
        max_attempts = greatest(max_attempts, least(attempt + 1, 1000))
    WHERE callback_id = %(callback_id)s::uuid AND (state = 'waiting_external'
    OR (state = 'running' AND callback_lease = run_lease))
  AND (callback_timeout_at IS NULL OR callback_timeout_at > now())  -- not timed out
    RETURNING *
)
SELECT r.*, pg_notify('awa_available', r.queue) AS notified FROM retried AS r
