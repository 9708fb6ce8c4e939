-- runtime_instance_upsert: publish this worker's runtime snapshot (every 10 s).
INSERT INTO awa.runtime_instances (
    instance_id, hostname, pid, started_at, last_seen_at, is_leader, snapshot
)
VALUES (
    %(instance_id)s::uuid, %(hostname)s, %(pid)s, %(started_at)s, now(), %(is_leader)s,
    %(snapshot)s::jsonb
)
ON CONFLICT (instance_id) DO UPDATE
SET last_seen_at = now(), is_leader = EXCLUDED.is_leader, snapshot = EXCLUDED.snapshot
