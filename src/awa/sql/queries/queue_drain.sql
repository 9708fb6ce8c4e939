-- queue_drain: cancel every job of a queue that is waiting to run (not running ones).
-- The rows are locked in id order before any changes (ADR 0050): in the update's own
-- (heap) order it deadlocked with a batch operation's chunk, which goes in id order.
WITH doomed AS (
    SELECT id FROM awa.jobs
    WHERE queue = %(queue)s AND state IN ('available', 'scheduled', 'retryable')
    ORDER BY id
    FOR UPDATE
)
UPDATE awa.jobs AS j
SET state = 'cancelled', finalized_at = now(),
    errors = awa.errors_append(j.errors, jsonb_build_array(jsonb_build_object(
        'error', 'queue drained', 'attempt', j.attempt, 'at', now(), 'type', 'Cancelled')))
FROM doomed AS d
WHERE j.id = d.id AND j.state IN ('available', 'scheduled', 'retryable')
