-- job_oldest_available: the id of the queue's available job that has waited longest
-- (earliest run_at), whose explanation the dashboard's queue page shows.
-- jobs_claim_idx is ordered (queue, priority, run_at, id): one probe per priority finds
-- each priority's oldest, instead of a pass over the queue's whole available range.
SELECT o.id
FROM unnest('{1,2,3,4}'::smallint[]) AS p(priority)
CROSS JOIN LATERAL (
    SELECT id, run_at FROM awa.jobs
    WHERE state = 'available' AND queue = %(queue)s AND priority = p.priority
    ORDER BY run_at, id
    LIMIT 1
) AS o
ORDER BY o.run_at, o.id
LIMIT 1
