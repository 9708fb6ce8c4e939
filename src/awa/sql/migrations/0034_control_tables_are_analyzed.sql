-- 0034: awa's small control tables get statistics.
-- Forward-only: never edit a shipped migration; add the next number instead.
--
-- Autovacuum analyzes a table after 50 changes, which a control table (the fleet pool,
-- limits, queue_meta, the leader's lease) may never see: never analyzed, the planner
-- takes it for ten pages (about 2 000 rows). Joined to the jobs of a busy database, that
-- priced job_explain and queue_control_list (every worker's control refresh) past
-- jit_above_cost, and JIT compilation made them take a second instead of a millisecond
-- (a review on 3 million jobs: 1 038 ms, 1 036 of them JIT; 1.8 ms once analyzed). An
-- analyzed empty table is taken as empty; autovacuum keeps up from there. Each is a few
-- rows: this takes milliseconds. Written to apply again over itself.

ANALYZE awa.queue_meta, awa.queue_limits, awa.queue_rate_buckets, awa.fleet_pool,
    awa.fleet_pool_members, awa.leader_lease, awa.runtime_instances, awa.cron_schedules,
    awa.handoff_seats, awa.batch_operations;
