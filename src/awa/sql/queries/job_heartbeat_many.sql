-- job_heartbeat_many: refresh heartbeat_at of this process's in-flight attempts.
-- Ids not returned are attempts that lost their lease (rescued or cancelled): the worker
-- tells their handlers to stop.
UPDATE awa.jobs AS j
SET heartbeat_at = now()
FROM unnest(%(ids)s::bigint[], %(run_leases)s::bigint[]) AS h(id, run_lease)
WHERE j.id = h.id AND j.run_lease = h.run_lease AND j.state = 'running'
RETURNING j.id
