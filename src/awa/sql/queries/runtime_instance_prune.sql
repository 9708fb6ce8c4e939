-- runtime_instance_prune: forget workers that have not reported for a while (crashed).
DELETE FROM awa.runtime_instances
WHERE last_seen_at < now() - %(older_than_ms)s::bigint * interval '1 millisecond'
