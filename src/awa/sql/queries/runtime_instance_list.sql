-- runtime_instance_list: workers seen within %(fresh_ms)s, the most recently seen first.
SELECT instance_id, hostname, pid, started_at, last_seen_at, is_leader, snapshot
FROM awa.runtime_instances
WHERE last_seen_at > now() - %(fresh_ms)s::bigint * interval '1 millisecond'
ORDER BY last_seen_at DESC
