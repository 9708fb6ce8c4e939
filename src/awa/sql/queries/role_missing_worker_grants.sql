-- role_missing_worker_grants: the grants of docs/security.md's awa_app block this role
-- lacks, one GRANT per object. Asked once at start: a worker without them failed later
-- and each its own way — every completion retried (the counts' functions, neither
-- PUBLIC's), or start() itself raised a driver error for cron_schedules after the
-- operator had granted just what the first message named (a review).
SELECT 'GRANT ' || string_agg(p.privilege, ', ' ORDER BY p.n) || ' ON ' || t.object
FROM unnest(ARRAY[
    'awa.jobs', 'awa.queue_meta', 'awa.cron_schedules', 'awa.runtime_instances',
    'awa.queue_limits', 'awa.queue_rate_buckets', 'awa.fleet_pool', 'awa.fleet_pool_members',
    'awa.batch_operations', 'awa.batch_operation_items', 'awa.handoff_seats', 'awa.dlq',
    'awa.schema_version', 'awa.leader_lease'
]) WITH ORDINALITY AS t(object, at)
CROSS JOIN unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE']) WITH ORDINALITY AS p(privilege, n)
WHERE NOT has_table_privilege(t.object, p.privilege)
  AND NOT (t.object = 'awa.dlq' AND p.privilege = 'UPDATE')
  AND NOT (t.object = 'awa.schema_version' AND p.privilege <> 'SELECT')
  AND NOT (t.object = 'awa.leader_lease' AND p.privilege IN ('INSERT', 'DELETE'))
GROUP BY t.object, t.at
UNION ALL
SELECT 'GRANT USAGE ON SEQUENCE ' || s.name
FROM unnest(ARRAY['awa.jobs_id_seq', 'awa.batch_operations_id_seq']) AS s(name)
WHERE NOT has_sequence_privilege(s.name, 'USAGE')
UNION ALL
SELECT 'GRANT EXECUTE ON FUNCTION ' || f.signature
FROM unnest(ARRAY[
    'awa.fold_finished_counts()',
    'awa.count_finished_outcomes(text[], awa.job_state[], timestamptz[], bigint[])'
]) AS f(signature)
WHERE NOT has_function_privilege(f.signature, 'EXECUTE')
