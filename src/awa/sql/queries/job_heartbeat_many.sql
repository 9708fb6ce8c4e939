-- job_heartbeat_many: refresh heartbeat_at of this process's in-flight attempts.
-- Ids not returned are attempts that lost their lease (rescued or cancelled): the worker
-- tells their handlers to stop. A heartbeat lost to a crash costs nothing: asynchronous
-- commit (ADR 0006).
-- The rows are locked in id order first, as every writer of several running jobs does
-- (migration 0029): in plan order they deadlocked with completions. Found by primary key
-- (``state::text`` keeps the planner off jobs_running_idx, which holds every running job
-- of the fleet and more).
UPDATE awa.jobs AS j
SET heartbeat_at = now()
FROM (
    SELECT l.id FROM awa.jobs AS l
    JOIN unnest(%(ids)s::bigint[], %(run_leases)s::bigint[], %(attempted_ats)s::timestamptz[])
        AS h(id, run_lease, attempted_at)
        ON l.id = h.id AND l.run_lease = h.run_lease AND l.attempted_at = h.attempted_at
    WHERE l.id = ANY (%(ids)s::bigint[]) AND l.state::text = 'running'
    ORDER BY l.id
    FOR UPDATE OF l
) AS mine,
    (SELECT set_config('synchronous_commit', %(synchronous_commit)s, true)) AS commit_mode
WHERE j.id = mine.id
RETURNING j.id
