-- job_oldest_available: the id of the queue's available job that has waited longest
-- (earliest run_at), whose explanation the dashboard's queue page shows.
-- jobs_claim_idx is ordered (queue, priority, run_at, id): one probe per priority finds
-- each priority's oldest, instead of a pass over the queue's whole available range.
-- Jobs adopted by a partitioned queue sit in jobs_partition_idx instead (ADR 0010),
-- ordered by key first: for such a queue the oldest is found on a pass over its adopted
-- jobs' index range (none for an unpartitioned queue).
SELECT o.id
FROM (
    SELECT c.id, c.run_at
    FROM unnest('{1,2,3,4}'::smallint[]) AS p(priority)
    CROSS JOIN LATERAL (
        SELECT id, run_at FROM awa.jobs
        WHERE state = 'available' AND queue = %(queue)s AND partition_key IS NULL
          AND priority = p.priority
        ORDER BY run_at, id
        LIMIT 1
    ) AS c
    UNION ALL
    (SELECT id, run_at FROM awa.jobs
    WHERE state = 'available' AND queue = %(queue)s AND partition_key IS NOT NULL
    ORDER BY run_at, id
    LIMIT 1)
) AS o
ORDER BY o.run_at, o.id
LIMIT 1
