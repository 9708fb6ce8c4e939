-- job_cancel_by_unique_key: cancel the unfinished job holding a unique key.
WITH cancelled AS (
    UPDATE awa.jobs
    SET state = 'cancelled', finalized_at = now(), heartbeat_at = NULL,
        errors = awa.errors_append(errors, jsonb_build_array(jsonb_build_object(
            'error', 'cancelled by unique key', 'attempt', attempt, 'at', now(),
            'type', 'Cancelled')))
    WHERE unique_key = %(unique_key)s::bytea
      AND state NOT IN ('completed', 'failed', 'cancelled')
    RETURNING *
)
SELECT c.*, pg_notify('awa_control', json_build_object(
    'cancel', c.id, 'run_lease', c.run_lease)::text) AS notified
FROM cancelled AS c
