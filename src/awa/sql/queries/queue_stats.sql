-- queue_stats: counts per state for every queue that has jobs or a queue_meta row.
-- One pass over jobs_queue_state_idx; cheap while finished jobs are pruned by retention.
WITH counts AS (
    SELECT queue,
        count(*) FILTER (WHERE state = 'available') AS available,
        count(*) FILTER (WHERE state = 'scheduled') AS scheduled,
        count(*) FILTER (WHERE state = 'running') AS running,
        count(*) FILTER (WHERE state = 'retryable') AS retryable,
        count(*) FILTER (WHERE state = 'failed') AS failed,
        count(*) FILTER (WHERE state = 'cancelled') AS cancelled,
        count(*) FILTER (WHERE state = 'waiting_external') AS waiting_external,
        count(*) FILTER (WHERE state = 'completed') AS completed,
        count(*) FILTER (
            WHERE state = 'completed' AND finalized_at > now() - interval '1 hour'
        ) AS completed_last_hour,
        extract(epoch FROM now() - min(run_at) FILTER (WHERE state = 'available'))::float8
            AS lag_seconds
    FROM awa.jobs
    GROUP BY queue
)
SELECT coalesce(c.queue, m.queue) AS queue,
    coalesce(c.available, 0) AS available, coalesce(c.scheduled, 0) AS scheduled,
    coalesce(c.running, 0) AS running, coalesce(c.retryable, 0) AS retryable,
    coalesce(c.failed, 0) AS failed, coalesce(c.cancelled, 0) AS cancelled,
    coalesce(c.waiting_external, 0) AS waiting_external,
    coalesce(c.completed, 0) AS completed,
    coalesce(c.completed_last_hour, 0) AS completed_last_hour,
    CASE WHEN c.lag_seconds < 0 THEN 0 ELSE c.lag_seconds END AS lag_seconds,
    coalesce(m.paused, false) AS paused
FROM counts AS c
FULL OUTER JOIN awa.queue_meta AS m ON m.queue = c.queue
ORDER BY 1
