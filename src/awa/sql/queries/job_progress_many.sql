-- job_progress_many: write the progress and metadata of running attempts, batched: one
-- statement per heartbeat interval for every attempt whose values changed (none: no
-- statement at all), or one job when a handler calls flush_progress(). Fenced like every
-- write of an attempt (id, run_lease, attempted_at, state = 'running'); progress
-- replaces, metadata merges top-level keys, so writing the same snapshot twice changes
-- nothing. Ids not returned lost their lease.
-- Rows locked in id order before any is updated, as in job_heartbeat_many (ADR 0050).
WITH mine AS (
    SELECT l.id FROM awa.jobs AS l
    WHERE l.id = ANY (%(ids)s::bigint[]) AND l.state::text = 'running'
    ORDER BY l.id
    FOR UPDATE
)
UPDATE awa.jobs AS j
SET progress = coalesce(u.progress, j.progress),
    metadata = CASE WHEN u.metadata IS NULL THEN j.metadata ELSE j.metadata || u.metadata END
FROM unnest(
    %(ids)s::bigint[], %(run_leases)s::bigint[], %(attempted_ats)s::timestamptz[],
    %(progress)s::jsonb[], %(metadata)s::jsonb[]
) AS u(id, run_lease, attempted_at, progress, metadata)
WHERE j.id = u.id AND j.run_lease = u.run_lease AND j.attempted_at = u.attempted_at
  AND j.state = 'running'
  AND (SELECT count(*) FROM mine) >= 0
RETURNING j.id
