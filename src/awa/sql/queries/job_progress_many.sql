-- job_progress_many: write the progress and metadata of running attempts, batched: one
-- statement per heartbeat interval for every attempt whose values changed (none: no
-- statement at all), or one job when a handler calls flush_progress(). Fenced like every
-- write of an attempt (id, run_lease, attempted_at, state = 'running'); progress
-- replaces, metadata merges top-level keys, so writing the same snapshot twice changes
-- nothing. Ids not returned lost their lease; ids returned as held were not written.
-- Rows locked in id order before any is updated, as in job_heartbeat_many (ADR 0050), and
-- as there a row another transaction holds is skipped, not waited for (reported held,
-- written next time): waiting, this statement kept every row below it locked, and the
-- heartbeat, skipping those, confirmed none of them (a review: one operator's lock
-- stopped every handler that reported progress).
WITH mine AS (
    SELECT l.id FROM awa.jobs AS l
    WHERE l.id = ANY (%(ids)s::bigint[]) AND l.state::text = 'running'
    ORDER BY l.id
    FOR UPDATE SKIP LOCKED
),
written AS (
    UPDATE awa.jobs AS j
    SET progress = coalesce(u.progress, j.progress),
        metadata = CASE WHEN u.metadata IS NULL THEN j.metadata ELSE j.metadata || u.metadata END
    FROM unnest(
        %(ids)s::bigint[], %(run_leases)s::bigint[], %(attempted_ats)s::timestamptz[],
        %(progress)s::jsonb[], %(metadata)s::jsonb[]
    ) AS u(id, run_lease, attempted_at, progress, metadata)
    WHERE j.id = u.id AND j.run_lease = u.run_lease AND j.attempted_at = u.attempted_at
      AND j.state = 'running'
      AND j.id = ANY (ARRAY(SELECT m.id FROM mine AS m))
    RETURNING j.id
)
SELECT w.id, false AS held FROM written AS w
UNION ALL
SELECT r.id, true
FROM awa.jobs AS r
JOIN unnest(%(ids)s::bigint[], %(run_leases)s::bigint[], %(attempted_ats)s::timestamptz[])
    AS k(id, run_lease, attempted_at)
    ON r.id = k.id AND r.run_lease = k.run_lease AND r.attempted_at = k.attempted_at
WHERE r.state::text = 'running'
  AND r.id <> ALL (ARRAY(SELECT m.id FROM mine AS m))
