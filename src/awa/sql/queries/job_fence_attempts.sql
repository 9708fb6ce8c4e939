-- job_fence_attempts: on shutdown, return attempts whose handlers did not stop in time to
-- retryable (or failed on their last attempt), fenced (awa.end_lost_attempts, migration
-- 0028), so nothing this process claimed stays running and a handler that still finishes
-- later cannot write; their slots of capped queues are announced free, as a cancel's are.
-- Only the attempts named (id, run_lease, attempted_at) that still run: a job rescued or
-- re-claimed meanwhile is another attempt's.
WITH mine AS (
    SELECT j.id FROM awa.jobs AS j
    JOIN unnest(%(ids)s::bigint[], %(run_leases)s::bigint[], %(attempted_ats)s::timestamptz[])
        AS f(id, run_lease, attempted_at)
        ON j.id = f.id AND j.run_lease = f.run_lease AND j.attempted_at = f.attempted_at
    WHERE j.state = 'running'
    ORDER BY j.id  -- the order every writer of several running jobs locks in (0029)
    FOR UPDATE OF j
)
SELECT r.id
FROM awa.end_lost_attempts(
    (SELECT coalesce(jsonb_object_agg(m.id, %(reason)s::text), '{}') FROM mine AS m),
    'Interrupted'
) AS r
