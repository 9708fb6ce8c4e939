-- queue_drain: cancel every job of a queue that is waiting to run (not running ones).
UPDATE awa.jobs
SET state = 'cancelled', finalized_at = now(),
    errors = awa.errors_append(errors, jsonb_build_array(jsonb_build_object(
        'error', 'queue drained', 'attempt', attempt, 'at', now(), 'type', 'Cancelled')))
WHERE queue = %(queue)s AND state IN ('available', 'scheduled', 'retryable')
