-- job_heartbeat_many: refresh heartbeat_at of this process's in-flight attempts.
-- Ids not returned are attempts that lost their lease (rescued or cancelled): the worker
-- tells their handlers to stop; ids returned as held are neither confirmed nor lost. A
-- heartbeat lost to a crash costs nothing: asynchronous commit (ADR 0006).
-- The rows are locked in id order before any is updated (ADR 0050): in the update's own
-- order (heap order) they deadlocked with completions. The lock is a gate the update
-- passes once (``count(*) >= 0``), so the update keeps its plan (a hash join; the same
-- join in one statement with the lock was planned as a nested loop, quadratic in the
-- number of attempts). Only running rows are locked (by primary key: ``state::text``
-- keeps the planner off jobs_running_idx): an attempt that lost its lease may still be
-- in flight, and waiting for its row — held by an operator's bulk retry, say — held
-- back every heartbeat of the process until its live jobs were rescued (a review).
-- A row another transaction holds (an operator's update left open) is skipped, not waited
-- for: waiting held back the beat of every attempt of the process, and past the lease
-- limit (ADR 0055) every handler was stopped for one locked row (a review). Only the
-- rows locked here are updated; the rescue skips locked rows too.
WITH mine AS (
    SELECT l.id FROM awa.jobs AS l
    WHERE l.id = ANY (%(ids)s::bigint[]) AND l.state::text = 'running'
    ORDER BY l.id
    FOR UPDATE SKIP LOCKED
),
beat AS (
    UPDATE awa.jobs AS j
    SET heartbeat_at = now()
    FROM unnest(%(ids)s::bigint[], %(run_leases)s::bigint[], %(attempted_ats)s::timestamptz[])
        AS h(id, run_lease, attempted_at),
        (SELECT set_config('synchronous_commit', %(synchronous_commit)s, true)) AS commit_mode
    WHERE j.id = h.id AND j.run_lease = h.run_lease AND j.attempted_at = h.attempted_at
      AND j.state = 'running'
      AND j.id = ANY (ARRAY(SELECT m.id FROM mine AS m))
    RETURNING j.id
)
-- held: running under the very attempt, but locked by another transaction: neither
-- confirmed nor lost this time (one running under another lease is lost, held or not).
SELECT b.id, false AS held FROM beat AS b
UNION ALL
SELECT r.id, true
FROM awa.jobs AS r
JOIN unnest(%(ids)s::bigint[], %(run_leases)s::bigint[], %(attempted_ats)s::timestamptz[])
    AS k(id, run_lease, attempted_at)
    ON r.id = k.id AND r.run_lease = k.run_lease AND r.attempted_at = k.attempted_at
WHERE r.state::text = 'running'
  AND r.id <> ALL (ARRAY(SELECT m.id FROM mine AS m))
