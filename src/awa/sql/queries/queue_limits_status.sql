-- queue_limits_status: every limited queue (or one, when %(queue)s is set) with what the
-- fleet runs now: running jobs (jobs_running_idx), the busiest partitions, and the tokens
-- in its bucket refilled to now. Read by `awa queue limits show`, the dashboard and
-- explain; operator frequency.
SELECT l.queue, l.concurrency, l.rate_limit, l.burst, l.partition_by, l.updated_at,
    (SELECT count(*) FROM awa.jobs AS r WHERE r.queue = l.queue AND r.state = 'running')
        AS running,
    coalesce((
        SELECT jsonb_agg(jsonb_build_array(t.partition_key, t.running) ORDER BY t.running DESC,
            t.partition_key)
        FROM (
            SELECT r.partition_key, count(*) AS running
            FROM awa.jobs AS r
            WHERE r.queue = l.queue AND r.state = 'running' AND l.partition_by IS NOT NULL
            GROUP BY r.partition_key
            ORDER BY count(*) DESC, r.partition_key
            LIMIT %(top)s
        ) AS t
    ), '[]'::jsonb) AS top_partitions,
    (SELECT least(coalesce(l.burst, ceil(l.rate_limit)),
                  b.tokens + l.rate_limit * extract(epoch FROM clock_timestamp() - b.refilled_at))
     FROM awa.queue_rate_buckets AS b
     WHERE b.queue = l.queue AND b.partition_key = '' AND l.partition_by IS NULL) AS tokens
FROM awa.queue_limits AS l
WHERE %(queue)s::text IS NULL OR l.queue = %(queue)s::text
ORDER BY l.queue
