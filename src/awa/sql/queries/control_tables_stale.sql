-- control_tables_stale: whether a control table the claim and explain statements join
-- (pause and overrides, fleet limits, the fleet pool) changed since its statistics were
-- taken, or has none (statistics reset). Autovacuum analyzes a table after 50 changes,
-- which these may never see: planned from stale statistics, a table of a few rows taken
-- for an empty one or for two thousand priced job_explain and every worker's control
-- refresh past jit_above_cost (migration 0034). Read from the cumulative statistics: one
-- row, no table access.
SELECT coalesce(bool_or(
    n_mod_since_analyze > 0 OR coalesce(last_analyze, last_autoanalyze) IS NULL
), false)
FROM pg_stat_user_tables
WHERE relid IN ('awa.queue_meta'::regclass, 'awa.queue_limits'::regclass,
                'awa.fleet_pool'::regclass, 'awa.fleet_pool_members'::regclass)
