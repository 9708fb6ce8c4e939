-- job_explain: what the database knows about one job and its queue, for client.explain,
-- in one statement (the live workers' snapshots come from runtime_instance_list).
-- The job is found by primary key in awa.jobs, else in awa.dlq (a failed job of a
-- dead-lettering queue is moved there). Every other fact is a bounded index range or a
-- primary-key row, computed only for an available job (the guards on f.state are
-- one-time filters, so for any other state those scans never start):
--   ahead           available jobs before it in claim order (priority, run_at, id): of its
--                   queue on jobs_claim_idx, or, in a partitioned queue, of its partition
--                   on jobs_partition_idx (plus those not adopted yet, on jobs_claim_idx);
--                   and, in a queue without partitions, ordered jobs at their key's turn
--                   on jobs_ordered_claim_idx (ordering_pick claims them in the same
--                   order); each counted up to %(ahead_cap)s;
--   queue_running   the queue's running jobs on jobs_running_idx (queue, heartbeat_at),
--                   and, in the same index's order, the %(ahead_cap)s with the oldest
--                   heartbeats as (id, claimed at, partition key): whether a live process
--                   runs them is read off the workers' snapshots (a stopped process's
--                   jobs have the oldest heartbeats, so the bound leaves them in);
--   part_running    the running jobs of its partition, in the same range;
--   completed_*     the queue's newest completions within %(rate_window_s)s, at most
--                   %(rate_sample)s of them, read backwards on an index of finalized_at,
--                   and how many of them were of the job's partition (its line moves at
--                   that share of the queue's rate);
--   fleet limits    its queue_limits row, its token bucket refilled to now (as the claim
--                   refills it), its fleet pool membership and awa.pool_room (ADR 0010);
--   ordering        for a job with an ordering key (ADR 0034): the key's unfinished jobs
--                   before it (counted up to %(ahead_cap)s, the first one named) on
--                   jobs_ordering_idx, and a started job of the key on
--                   jobs_ordering_held_idx — what the claim's awa.ordering_ready reads.
-- now() is returned so that every "in 5 s" / "2 min ago" is measured on one clock.
WITH found AS (
    (SELECT id, kind, queue, args, state, priority, attempt, max_attempts, run_lease, tags,
        metadata, progress, errors, created_at, run_at, attempted_at, deadline_at,
        finalized_at, heartbeat_at, callback_id, callback_timeout_at, partition_key,
        ordering_key, NULL::timestamptz AS dead_lettered_at
    FROM awa.jobs WHERE id = %(id)s)
    UNION ALL
    (SELECT id, kind, queue, args, state, priority, attempt, max_attempts, run_lease, tags,
        metadata, progress, errors, created_at, run_at, attempted_at, deadline_at,
        finalized_at, heartbeat_at, callback_id, callback_timeout_at, NULL::text, ordering_key,
        dlq_at
    FROM awa.dlq WHERE id = %(id)s)
    LIMIT 1
), job AS (
    -- The job's partition under its queue's partition_by: adopted, or as it will be.
    SELECT f.*, l.concurrency, l.rate_limit AS fleet_rate, l.burst AS fleet_burst,
        l.partition_by, l.updated_at AS limits_updated_at,
        CASE WHEN l.partition_by IS NOT NULL THEN coalesce(
            f.partition_key, left(coalesce(f.args ->> l.partition_by, ''), 200)) END AS part
    FROM found AS f
    LEFT JOIN awa.queue_limits AS l ON l.queue = f.queue
)
SELECT j.*, now() AS db_now,
    coalesce(m.paused, false) AS paused, m.paused_at, m.paused_by,
    coalesce(plain.n, 0) + coalesce(adopted.n, 0) + coalesce(ordered.n, 0) AS ahead,
    running.n AS queue_running, running_list.ids AS running_ids,
    running_list.claimed AS running_claimed, running_list.parts AS running_parts,
    part_running.n AS part_running,
    done.n AS completed_recently, done.oldest AS completed_since,
    done.part_n AS completed_in_partition,
    least(coalesce(j.fleet_burst, ceil(j.fleet_rate)),
          coalesce(b.tokens + j.fleet_rate * extract(epoch FROM now() - b.refilled_at),
                   coalesce(j.fleet_burst, ceil(j.fleet_rate)))) AS fleet_tokens,
    pool.total AS pool_total, pm.min_workers AS pool_min_workers, pm.weight AS pool_weight,
    CASE WHEN pm.queue IS NOT NULL AND j.state = 'available'
        THEN awa.pool_room(j.queue, now()) END AS pool_room,
    pool_running.n AS pool_running,
    key_ahead.n AS key_ahead, earlier.id AS key_first_id, earlier.state AS key_first_state,
    earlier.queue AS key_first_queue, held.id AS key_held_id, held.state AS key_held_state,
    held.queue AS key_held_queue
FROM job AS j
LEFT JOIN awa.queue_meta AS m ON m.queue = j.queue
LEFT JOIN LATERAL (
    SELECT count(*) AS n FROM (
        SELECT 1 FROM awa.jobs AS a
        WHERE j.state = 'available' AND a.state = 'available' AND a.partition_key IS NULL
          AND a.ordering_key IS NULL AND a.queue = j.queue
          AND (a.priority, a.run_at, a.id) < (j.priority, j.run_at, j.id)
          AND (j.part IS NULL
               OR left(coalesce(a.args ->> j.partition_by, ''), 200) = j.part)
        LIMIT %(ahead_cap)s
    ) AS s
) AS plain ON true
LEFT JOIN LATERAL (
    SELECT count(*) AS n FROM (
        SELECT 1 FROM awa.jobs AS a
        WHERE j.state = 'available' AND j.part IS NOT NULL AND a.state = 'available'
          AND a.partition_key IS NOT NULL AND a.queue = j.queue AND a.partition_key = j.part
          AND (a.priority, a.run_at, a.id) < (j.priority, j.run_at, j.id)
        LIMIT %(ahead_cap)s
    ) AS s
) AS adopted ON true
LEFT JOIN LATERAL (
    SELECT count(*) AS n FROM (
        SELECT 1 FROM awa.jobs AS a
        WHERE j.state = 'available' AND j.part IS NULL AND a.state = 'available'
          AND a.partition_key IS NULL AND a.ordering_key IS NOT NULL AND a.queue = j.queue
          AND (a.priority, a.run_at, a.id) < (j.priority, j.run_at, j.id)
          AND awa.ordering_ready(a.ordering_key, a.id)
        LIMIT %(ahead_cap)s
    ) AS s
) AS ordered ON true
LEFT JOIN LATERAL (
    SELECT count(*) AS n FROM awa.jobs AS r
    WHERE j.state = 'available' AND r.state = 'running' AND r.queue = j.queue
) AS running ON true
LEFT JOIN LATERAL (
    SELECT array_agg(o.id) AS ids, array_agg(o.attempted_at) AS claimed,
        array_agg(o.partition_key) AS parts
    FROM (
        SELECT r.id, r.attempted_at, r.partition_key FROM awa.jobs AS r
        WHERE j.state = 'available' AND r.state = 'running' AND r.queue = j.queue
        ORDER BY r.heartbeat_at
        LIMIT %(ahead_cap)s
    ) AS o
) AS running_list ON true
LEFT JOIN LATERAL (
    SELECT count(*) AS n FROM awa.jobs AS r
    WHERE j.state = 'available' AND j.part IS NOT NULL AND r.state = 'running'
      AND r.queue = j.queue AND r.partition_key = j.part
) AS part_running ON true
LEFT JOIN LATERAL (
    SELECT count(*) AS n, min(c.finalized_at) AS oldest,
        count(*) FILTER (WHERE c.partition_key = j.part) AS part_n
    FROM (
        SELECT c.finalized_at, c.partition_key FROM awa.jobs AS c
        WHERE j.state = 'available' AND c.state = 'completed' AND c.queue = j.queue
          AND c.finalized_at > now() - %(rate_window_s)s::float8 * interval '1 second'
        ORDER BY c.finalized_at DESC
        LIMIT %(rate_sample)s
    ) AS c
) AS done ON true
LEFT JOIN awa.queue_rate_buckets AS b
    ON j.fleet_rate IS NOT NULL AND b.queue = j.queue AND b.partition_key = coalesce(j.part, '')
LEFT JOIN awa.fleet_pool_members AS pm ON pm.queue = j.queue
LEFT JOIN awa.fleet_pool AS pool ON pm.queue IS NOT NULL
LEFT JOIN LATERAL (
    SELECT count(*) AS n FROM awa.fleet_pool_members AS o
    JOIN awa.jobs AS r ON r.queue = o.queue AND r.state = 'running'
    WHERE j.state = 'available' AND pm.queue IS NOT NULL
) AS pool_running ON true
LEFT JOIN LATERAL (
    SELECT count(*) AS n FROM (
        SELECT 1 FROM awa.jobs AS e
        WHERE j.state = 'available' AND j.ordering_key IS NOT NULL
          AND e.ordering_key = j.ordering_key AND e.id < j.id
          AND e.state IN ('scheduled', 'available', 'running', 'retryable', 'waiting_external')
        LIMIT %(ahead_cap)s
    ) AS s
) AS key_ahead ON true
LEFT JOIN LATERAL (
    SELECT e.id, e.state, e.queue FROM awa.jobs AS e
    WHERE j.state = 'available' AND j.ordering_key IS NOT NULL
      AND e.ordering_key = j.ordering_key AND e.id < j.id
      AND e.state IN ('scheduled', 'available', 'running', 'retryable', 'waiting_external')
    ORDER BY e.id
    LIMIT 1
) AS earlier ON true
LEFT JOIN LATERAL (
    SELECT h.id, h.state, h.queue FROM awa.jobs AS h
    WHERE j.state = 'available' AND j.ordering_key IS NOT NULL
      AND h.ordering_key = j.ordering_key AND h.id <> j.id
      AND h.state IN ('running', 'waiting_external')
    ORDER BY h.id
    LIMIT 1
) AS held ON true
