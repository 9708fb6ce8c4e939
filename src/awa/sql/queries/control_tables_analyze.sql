-- control_tables_analyze: fresh statistics for the control tables control_tables_stale
-- watches. Each holds a few rows per queue: milliseconds, and a SHARE UPDATE EXCLUSIVE
-- lock that blocks no read or write. Needs the tables' owner (PostgreSQL skips a table
-- it may not analyze, with a warning).
ANALYZE awa.queue_meta, awa.queue_limits, awa.fleet_pool, awa.fleet_pool_members
