-- job_attempt_writes: the two batched writes a worker makes to its own running attempts,
-- one file because they are fenced, locked and answered alike; each statement is the file
-- less the other's part.
--   beat: refresh heartbeat_at of this process's in-flight attempts. A heartbeat lost to
--     a crash costs nothing: asynchronous commit (ADR 0006).
--   progress: write the progress and metadata of running attempts: one statement per
--     heartbeat interval for every attempt whose values changed (none: no statement at
--     all), or one job when a handler calls flush_progress(). Progress replaces, metadata
--     merges top-level keys, so writing the same snapshot twice changes nothing.
-- Fenced like every write of an attempt (id, run_lease, attempted_at, state = 'running').
-- Ids not returned lost their lease (rescued or cancelled): the worker tells their
-- handlers to stop; ids returned as held were neither confirmed nor written this time.
-- The rows are locked in id order before any is updated (ADR 0050): in the update's own
-- order (heap order) they deadlocked with completions. The lock is a gate the update
-- passes once (``= ANY (ARRAY(SELECT ...))``), so the update keeps its plan (a hash join;
-- the same join in one statement with the lock was planned as a nested loop, quadratic in
-- the number of attempts). Only running rows are locked (by primary key: ``state::text``
-- keeps the planner off jobs_running_idx): an attempt that lost its lease may still be
-- in flight, and waiting for its row — held by an operator's bulk retry, say — held
-- back every heartbeat of the process until its live jobs were rescued (a review).
-- A row another transaction holds (an operator's update left open) is skipped, not waited
-- for: waiting held back the beat of every attempt of the process, and past the lease
-- limit (ADR 0055) every handler was stopped for one locked row (a review); a progress
-- write that waited kept every row below it locked, and the heartbeat, skipping those,
-- confirmed none of them. Only the rows locked here are updated; the rescue skips locked
-- rows too.
WITH mine AS (
    SELECT l.id FROM awa.jobs AS l
    WHERE l.id = ANY (%(ids)s::bigint[]) AND l.state::text = 'running'
    ORDER BY l.id
    FOR UPDATE SKIP LOCKED
),
-- beat {
written AS (
    UPDATE awa.jobs AS j
    SET heartbeat_at = now()
    FROM unnest(%(ids)s::bigint[], %(run_leases)s::bigint[], %(attempted_ats)s::timestamptz[])
        AS u(id, run_lease, attempted_at),
        (SELECT set_config('synchronous_commit', %(synchronous_commit)s, true)) AS commit_mode
    WHERE j.id = u.id AND j.run_lease = u.run_lease AND j.attempted_at = u.attempted_at
      AND j.state = 'running'
      AND j.id = ANY (ARRAY(SELECT m.id FROM mine AS m))
    RETURNING j.id
)
-- } beat
-- progress {
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
-- } progress
-- held: running under the very attempt, but locked by another transaction: neither
-- confirmed nor lost this time (one running under another lease is lost, held or not).
SELECT w.id, false AS held FROM written AS w
UNION ALL
SELECT r.id, true
FROM awa.jobs AS r
JOIN unnest(%(ids)s::bigint[], %(run_leases)s::bigint[], %(attempted_ats)s::timestamptz[])
    AS k(id, run_lease, attempted_at)
    ON r.id = k.id AND r.run_lease = k.run_lease AND r.attempted_at = k.attempted_at
WHERE r.state::text = 'running'
  AND r.id <> ALL (ARRAY(SELECT m.id FROM mine AS m))
