-- queue_control_list: the control state of all of one worker's queues in ONE statement,
-- read once per refresh cadence and at once on an awa_control notice (ADR 0011) — not a
-- statement per queue, so a worker with a thousand queues refreshes as cheaply as one
-- with a single queue. Per queue: pause and runtime overrides (queue_meta), fleet limits,
-- fleet-pool membership and, for a coordinated queue, what the fleet runs now
-- (jobs_running_idx), and for a partitioned one its five busiest partitions as
-- [[key, running], …]. Every worker queue gets a row, overridden or not.
SELECT q.queue,
    coalesce(m.paused, false) AS paused, m.paused_at, m.paused_by,
    m.override_poll_interval_ms, m.override_claim_batch_size, m.override_rate_limit,
    m.override_deadline_ms, m.override_max_workers, m.override_min_workers,
    m.override_weight, m.overrides_updated_at, m.override_min_workers_at,
    l.concurrency AS limit_concurrency, l.rate_limit AS limit_rate_limit,
    l.burst AS limit_burst, l.partition_by AS limit_partition_by,
    l.updated_at AS limits_updated_at,
    p.min_workers AS pool_min_workers, p.weight AS pool_weight, fp.total AS pool_total,
    CASE WHEN l.queue IS NOT NULL OR p.queue IS NOT NULL THEN (
        SELECT count(*) FROM awa.jobs AS r WHERE r.queue = q.queue AND r.state = 'running'
    ) END AS fleet_running,
    CASE WHEN l.partition_by IS NOT NULL THEN (
        SELECT jsonb_agg(jsonb_build_array(t.partition_key, t.n) ORDER BY t.n DESC, t.partition_key)
        FROM (
            SELECT r.partition_key, count(*) AS n FROM awa.jobs AS r
            WHERE r.queue = q.queue AND r.state = 'running'
            GROUP BY r.partition_key
            ORDER BY count(*) DESC, r.partition_key
            LIMIT 5
        ) AS t
    ) END AS fleet_top_partitions
FROM unnest(%(queues)s::text[]) AS q(queue)
LEFT JOIN awa.queue_meta AS m ON m.queue = q.queue
LEFT JOIN awa.queue_limits AS l ON l.queue = q.queue
LEFT JOIN awa.fleet_pool_members AS p ON p.queue = q.queue
LEFT JOIN awa.fleet_pool AS fp ON p.queue IS NOT NULL
