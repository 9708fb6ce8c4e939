-- job_progress_many: write the progress and metadata of running attempts, batched: one
-- statement per heartbeat interval for every attempt whose values changed (none: no
-- statement at all), or one job when a handler calls flush_progress(). Fenced like every
-- write of an attempt (id, run_lease, attempted_at, state = 'running'); progress
-- replaces, metadata merges top-level keys, so writing the same snapshot twice changes
-- nothing. Ids not returned lost their lease.
-- Rows locked in id order first, by primary key, as in job_heartbeat_many (migration 0029).
UPDATE awa.jobs AS j
SET progress = coalesce(mine.progress, j.progress),
    metadata = CASE WHEN mine.metadata IS NULL THEN j.metadata
        ELSE j.metadata || mine.metadata END
FROM (
    SELECT l.id, u.progress, u.metadata FROM awa.jobs AS l
    JOIN unnest(
        %(ids)s::bigint[], %(run_leases)s::bigint[], %(attempted_ats)s::timestamptz[],
        %(progress)s::jsonb[], %(metadata)s::jsonb[]
    ) AS u(id, run_lease, attempted_at, progress, metadata)
        ON l.id = u.id AND l.run_lease = u.run_lease AND l.attempted_at = u.attempted_at
    WHERE l.id = ANY (%(ids)s::bigint[]) AND l.state::text = 'running'
    ORDER BY l.id
    FOR UPDATE OF l
) AS mine
WHERE j.id = mine.id
RETURNING j.id
