-- queue_stats: counts per state for every queue that has jobs or a queue_meta row.
-- One branch per partial index (claim, due, running, waiting, finished): each count is an
-- index (mostly index-only) scan of its own state set instead of a pass over the table.
-- The finished jobs are not read: their counts are kept as they change (ADR 0054).
WITH waiting AS (
    SELECT queue,
        count(*) AS available,
        extract(epoch FROM now() - min(run_at))::float8 AS lag_seconds
    FROM (
        -- one branch per claim index: available jobs sit in exactly one (ADR 0010, 0034)
        SELECT queue, run_at FROM awa.jobs
        WHERE state = 'available' AND partition_key IS NULL AND ordering_key IS NULL
        UNION ALL
        SELECT queue, run_at FROM awa.jobs
        WHERE state = 'available' AND partition_key IS NULL AND ordering_key IS NOT NULL
        UNION ALL
        SELECT queue, run_at FROM awa.jobs
        WHERE state = 'available' AND partition_key IS NOT NULL
    ) AS a
    GROUP BY queue
), due AS (
    SELECT queue,
        count(*) FILTER (WHERE state = 'scheduled') AS scheduled,
        count(*) FILTER (WHERE state = 'retryable') AS retryable
    FROM awa.jobs WHERE state IN ('scheduled', 'retryable') GROUP BY queue
), running AS (
    SELECT queue, count(*) AS running FROM awa.jobs WHERE state = 'running' GROUP BY queue
), parked AS (
    SELECT queue, count(*) AS waiting_external
    FROM awa.jobs WHERE state = 'waiting_external' GROUP BY queue
), finished AS (
    -- kept as they change (migration 0038): a few hundred rows per queue, however many
    -- finished jobs are retained
    SELECT * FROM awa.finished_counts_by_queue()
), queues AS (
    SELECT queue FROM waiting UNION SELECT queue FROM due UNION SELECT queue FROM running
    UNION SELECT queue FROM parked UNION SELECT queue FROM finished
    UNION SELECT queue FROM awa.queue_meta
)
SELECT q.queue,
    coalesce(w.available, 0) AS available, coalesce(d.scheduled, 0) AS scheduled,
    coalesce(r.running, 0) AS running, coalesce(d.retryable, 0) AS retryable,
    coalesce(f.failed, 0) AS failed, coalesce(f.cancelled, 0) AS cancelled,
    coalesce(p.waiting_external, 0) AS waiting_external,
    coalesce(f.completed, 0) AS completed,
    coalesce(f.completed_last_hour, 0) AS completed_last_hour,
    CASE WHEN w.lag_seconds < 0 THEN 0 ELSE w.lag_seconds END AS lag_seconds,
    coalesce(m.paused, false) AS paused,
    coalesce(f.completed_last_minute, 0) AS completed_last_minute
FROM queues AS q
LEFT JOIN waiting AS w USING (queue)
LEFT JOIN due AS d USING (queue)
LEFT JOIN running AS r USING (queue)
LEFT JOIN parked AS p USING (queue)
LEFT JOIN finished AS f USING (queue)
LEFT JOIN awa.queue_meta AS m USING (queue)
ORDER BY q.queue
