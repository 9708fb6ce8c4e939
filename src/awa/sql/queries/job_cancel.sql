-- job_cancel: cancel one job that has not finished. A running job is cancelled at once:
-- its attempt's late outcome no longer matches state = 'running' and is fenced, and the
-- worker running it is told on awa_control so the handler can stop.
WITH cancelled AS (
    UPDATE awa.jobs
    SET state = 'cancelled', finalized_at = now(), heartbeat_at = NULL,
        errors = awa.errors_append(errors, jsonb_build_array(jsonb_build_object(
            'error', %(reason)s::text, 'attempt', attempt, 'at', now(), 'type', 'Cancelled')))
    WHERE id = %(id)s AND state NOT IN ('completed', 'failed', 'cancelled')
    RETURNING *
)
SELECT c.*, pg_notify('awa_control', json_build_object(
    'cancel', c.id, 'run_lease', c.run_lease)::text) AS notified
FROM cancelled AS c
