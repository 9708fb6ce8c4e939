-- job_explain: what the database knows about one job and its queue, for client.explain,
-- in one statement (the live workers' snapshots come from runtime_instance_list).
-- The job is found by primary key in awa.jobs, else in awa.dlq (a failed job of a
-- dead-lettering queue is moved there). Every other fact is one bounded index range,
-- computed only for an available job (the guard on f.state is a one-time filter, so
-- for any other state those scans never start):
--   ahead          available jobs of the queue before it in claim order (priority, run_at,
--                  id), counted up to %(ahead_cap)s on jobs_claim_idx — or, for a job
--                  adopted by a partitioned queue, those of its own partition on
--                  jobs_partition_idx (each guarded by a one-time filter, ADR 0010);
--   queue_running  the queue's running jobs, on jobs_running_idx (a set bounded by the
--                  fleet's permits);
--   completed_*    the queue's newest completions within %(rate_window_s)s, at most
--                  %(rate_sample)s of them, read backwards on jobs_finished_idx.
-- now() is returned so that every "in 5 s" / "2 min ago" is measured on one clock.
WITH found AS (
    (SELECT id, kind, queue, args, state, priority, attempt, max_attempts, run_lease, tags,
        metadata, progress, errors, created_at, run_at, attempted_at, deadline_at,
        finalized_at, heartbeat_at, callback_timeout_at, partition_key,
        NULL::timestamptz AS dead_lettered_at
    FROM awa.jobs WHERE id = %(id)s)
    UNION ALL
    (SELECT id, kind, queue, args, state, priority, attempt, max_attempts, run_lease, tags,
        metadata, progress, errors, created_at, run_at, attempted_at, deadline_at,
        finalized_at, heartbeat_at, callback_timeout_at, NULL::text, dlq_at
    FROM awa.dlq WHERE id = %(id)s)
    LIMIT 1
)
SELECT f.*, now() AS db_now,
    coalesce(m.paused, false) AS paused, m.paused_at, m.paused_by,
    ahead.n AS ahead, running.n AS queue_running,
    done.n AS completed_recently, done.oldest AS completed_since
FROM found AS f
LEFT JOIN awa.queue_meta AS m ON m.queue = f.queue
LEFT JOIN LATERAL (
    SELECT count(*) AS n FROM (
        (SELECT 1 FROM awa.jobs AS a
        WHERE f.state = 'available' AND f.partition_key IS NULL
          AND a.state = 'available' AND a.queue = f.queue AND a.partition_key IS NULL
          AND (a.priority, a.run_at, a.id) < (f.priority, f.run_at, f.id)
        LIMIT %(ahead_cap)s)
        UNION ALL
        (SELECT 1 FROM awa.jobs AS a
        WHERE f.state = 'available' AND f.partition_key IS NOT NULL
          AND a.state = 'available' AND a.queue = f.queue
          AND a.partition_key = f.partition_key
          AND (a.priority, a.run_at, a.id) < (f.priority, f.run_at, f.id)
        LIMIT %(ahead_cap)s)
    ) AS s
) AS ahead ON true
LEFT JOIN LATERAL (
    SELECT count(*) AS n FROM awa.jobs AS r
    WHERE f.state = 'available' AND r.state = 'running' AND r.queue = f.queue
) AS running ON true
LEFT JOIN LATERAL (
    SELECT count(*) AS n, min(c.finalized_at) AS oldest FROM (
        SELECT c.finalized_at FROM awa.jobs AS c
        WHERE f.state = 'available' AND c.state = 'completed' AND c.queue = f.queue
          AND c.finalized_at > now() - %(rate_window_s)s::float8 * interval '1 second'
        ORDER BY c.finalized_at DESC
        LIMIT %(rate_sample)s
    ) AS c
) AS done ON true
