-- runtime_instance_prune: forget workers that have not reported for a while (crashed).
-- Fenced: does nothing unless the given epoch is still the leader lease's (ADR 0019).
DELETE FROM awa.runtime_instances
WHERE last_seen_at < now() - %(older_than_ms)s::bigint * interval '1 millisecond'
  AND (SELECT awa.leader_holds(%(epoch)s::bigint))
