-- job_claim_available: claim up to %(limit)s available jobs of one queue, in one statement.
-- The dispatcher holds one permit per row it may receive (permit before claim).
-- FOR UPDATE SKIP LOCKED lets dispatchers in other processes take disjoint rows; the
-- NOT EXISTS on queue_meta makes a pause effective on the very next claim of every worker;
-- the two on queue_limits and fleet_pool_members keep a worker that has not yet heard of a
-- new fleet limit from claiming around it (it finds nothing, then switches to
-- job_claim_coordinated at its next control refresh, at once on the notice).
-- Each claim starts a new attempt: attempt and run_lease go up by one, and every later
-- write of this attempt must match (id, run_lease, state = 'running').
-- The commit may be asynchronous (%(synchronous_commit)s, see ADR 0006): a claim lost in a
-- server crash is re-made later with the same run_lease but a later attempted_at, and
-- every fenced write matches attempted_at too, so the lost attempt stays fenced.
-- Expects jobs_claim_idx (queue, priority, run_at, id)
--     WHERE state = 'available' AND partition_key IS NULL.
WITH commit_mode AS MATERIALIZED (
    SELECT set_config('synchronous_commit', %(synchronous_commit)s, true)
), picked AS (
    SELECT id
    FROM awa.jobs
    WHERE state = 'available' AND queue = %(queue)s AND partition_key IS NULL
      AND NOT EXISTS (
          SELECT 1 FROM awa.queue_meta AS m WHERE m.queue = %(queue)s AND m.paused
      )
      AND NOT EXISTS (SELECT 1 FROM awa.queue_limits AS l WHERE l.queue = %(queue)s)
      AND NOT EXISTS (SELECT 1 FROM awa.fleet_pool_members AS p WHERE p.queue = %(queue)s)
    ORDER BY priority, run_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE awa.jobs AS j
SET state = 'running',
    attempt = j.attempt + 1,
    run_lease = j.run_lease + 1,
    attempted_at = now(),
    heartbeat_at = now(),
    deadline_at = CASE WHEN %(deadline_ms)s::bigint > 0
        THEN now() + %(deadline_ms)s::bigint * interval '1 millisecond' END
FROM picked, commit_mode
WHERE j.id = picked.id
-- Empty metadata and errors come back NULL: the row factory makes them {} and [] without
-- running the JSON decoder twice per job.
RETURNING j.id, j.kind, j.queue, j.args, j.state, j.priority, j.attempt, j.max_attempts,
    j.run_lease, j.tags, nullif(j.metadata, '{}'::jsonb) AS metadata, j.progress,
    nullif(j.errors, '[]'::jsonb) AS errors, j.created_at, j.run_at,
    j.attempted_at, j.deadline_at, j.finalized_at
