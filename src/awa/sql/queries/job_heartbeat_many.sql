-- job_heartbeat_many: refresh heartbeat_at of this process's in-flight attempts.
-- Ids not returned are attempts that lost their lease (rescued or cancelled): the worker
-- tells their handlers to stop. A heartbeat lost to a crash costs nothing: asynchronous
-- commit (ADR 0006).
UPDATE awa.jobs AS j
SET heartbeat_at = now()
FROM unnest(%(ids)s::bigint[], %(run_leases)s::bigint[], %(attempted_ats)s::timestamptz[])
    AS h(id, run_lease, attempted_at),
    (SELECT set_config('synchronous_commit', %(synchronous_commit)s, true)) AS commit_mode
WHERE j.id = h.id AND j.run_lease = h.run_lease AND j.attempted_at = h.attempted_at
  AND j.state = 'running'
RETURNING j.id
