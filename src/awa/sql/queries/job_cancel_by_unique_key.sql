-- job_cancel_by_unique_key: cancel the unfinished job holding a unique key.
-- A running job's slot of a capped queue is announced free (migration 0024).
WITH cancelled AS (
    UPDATE awa.jobs AS j
    SET state = 'cancelled', finalized_at = now(), heartbeat_at = NULL,
        errors = awa.errors_append(j.errors, jsonb_build_array(jsonb_build_object(
            'error', 'cancelled by unique key', 'attempt', j.attempt, 'at', now(),
            'type', 'Cancelled')))
    FROM (
        SELECT id, state FROM awa.jobs
        WHERE unique_key = %(unique_key)s::bytea
          AND state NOT IN ('completed', 'failed', 'cancelled')
        FOR UPDATE
    ) AS before
    WHERE j.id = before.id AND j.state NOT IN ('completed', 'failed', 'cancelled')
    RETURNING j.*, before.state = 'running' AS was_running
)
SELECT c.*, pg_notify('awa_control', json_build_object(
    'cancel', c.id, 'run_lease', c.run_lease)::text) AS notified,
    CASE WHEN c.was_running THEN awa.announce_freed_in(ARRAY[c.queue]) END AS freed
FROM cancelled AS c
