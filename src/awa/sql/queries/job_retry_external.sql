-- job_retry_external: an external system asks for the job to run again now. An exhausted
-- attempt budget is widened by one so the retry can run; it waits at its original_priority
-- (a new wait ages afresh); the queue is woken.
-- A job whose handler still runs (the callback came before it returned) is made available
-- too, and the worker running it is told on awa_control, as for a cancel, so the handler
-- stops: untold, it ran on beside the retry claimed by another process (a review).
WITH retried AS (
    UPDATE awa.jobs AS j
    SET state = 'available', run_at = now(), partition_key = NULL, heartbeat_at = NULL,
        priority = original_priority,
        callback_id = NULL, callback_timeout_at = NULL,
        max_attempts = greatest(max_attempts, least(attempt + 1, 1000))
    FROM (SELECT id, state FROM awa.jobs WHERE callback_id = %(callback_id)s::uuid FOR UPDATE)
        AS before
    WHERE j.id = before.id AND (j.state = 'waiting_external'
        OR (j.state = 'running' AND j.callback_lease = j.run_lease))
      AND (j.callback_timeout_at IS NULL OR j.callback_timeout_at > now())  -- not timed out
    RETURNING j.*, before.state = 'running' AS was_running
)
SELECT r.*, pg_notify('awa_available', r.queue) AS notified,
    CASE WHEN r.was_running THEN pg_notify('awa_control', json_build_object(
        'cancel', r.id, 'run_lease', r.run_lease)::text) END AS stopped
FROM retried AS r
