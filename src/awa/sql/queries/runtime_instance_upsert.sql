-- runtime_instance_upsert: publish this worker's runtime snapshot (every 10 s).
-- started_at is the database's time of the first report, never the worker's clock: it is
-- compared with claim times (explain), and a worker's clock five minutes fast had its
-- running jobs explained as orphaned until its next report (a review).
INSERT INTO awa.runtime_instances (
    instance_id, hostname, pid, started_at, last_seen_at, is_leader, snapshot
)
VALUES (
    %(instance_id)s::uuid, %(hostname)s, %(pid)s, now(), now(), %(is_leader)s,
    %(snapshot)s::jsonb
)
ON CONFLICT (instance_id) DO UPDATE
SET last_seen_at = now(), is_leader = EXCLUDED.is_leader, snapshot = EXCLUDED.snapshot
