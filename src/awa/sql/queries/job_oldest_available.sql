-- job_oldest_available: the id of the queue's available job that has waited longest
-- (earliest run_at), whose explanation the dashboard's queue page shows.
-- An available job sits in one of two indexes (ADR 0010): jobs_claim_idx (queue,
-- priority, run_at, id) holds the unpartitioned and not yet adopted ones — one probe per
-- priority finds each priority's oldest; jobs_partition_idx (queue, partition_key,
-- priority, run_at, id) holds the adopted ones — a loose scan finds the distinct keys
-- (one probe each, the first %(max_keys)s keys), then one probe per key and priority;
-- jobs_ordered_idx (queue, ordering_key, id) holds those with an ordering key (ADR 0034),
-- whose range for the queue is read whole (the dashboard's frequency, not the claim's).
WITH RECURSIVE keys(k, n) AS (
    (SELECT a.partition_key, 1 FROM awa.jobs AS a
     WHERE a.queue = %(queue)s AND a.state = 'available' AND a.partition_key IS NOT NULL
     ORDER BY a.partition_key LIMIT 1)
    UNION ALL
    SELECT (SELECT a.partition_key FROM awa.jobs AS a
            WHERE a.queue = %(queue)s AND a.state = 'available'
              AND a.partition_key IS NOT NULL AND a.partition_key > keys.k
            ORDER BY a.partition_key LIMIT 1), keys.n + 1
    FROM keys WHERE keys.k IS NOT NULL AND keys.n < %(max_keys)s
), heads AS (
    SELECT o.id, o.run_at
    FROM unnest('{1,2,3,4}'::smallint[]) AS p(priority)
    CROSS JOIN LATERAL (
        SELECT id, run_at FROM awa.jobs
        WHERE state = 'available' AND partition_key IS NULL AND ordering_key IS NULL
          AND queue = %(queue)s AND priority = p.priority
        ORDER BY run_at, id
        LIMIT 1
    ) AS o
    UNION ALL
    SELECT o.id, o.run_at
    FROM keys CROSS JOIN unnest('{1,2,3,4}'::smallint[]) AS p(priority)
    CROSS JOIN LATERAL (
        SELECT id, run_at FROM awa.jobs
        WHERE state = 'available' AND partition_key IS NOT NULL AND queue = %(queue)s
          AND partition_key = keys.k AND priority = p.priority
        ORDER BY run_at, id
        LIMIT 1
    ) AS o
    WHERE keys.k IS NOT NULL
    UNION ALL
    (SELECT id, run_at FROM awa.jobs
     WHERE state = 'available' AND partition_key IS NULL AND ordering_key IS NOT NULL
       AND queue = %(queue)s
     ORDER BY run_at, id
     LIMIT 1)
)
SELECT id FROM heads ORDER BY run_at, id LIMIT 1
