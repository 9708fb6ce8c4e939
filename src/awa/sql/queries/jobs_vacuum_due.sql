-- jobs_vacuum_due: how many dead row versions awa.jobs holds, and how long ago anyone
-- (autovacuum, an operator, this leader) last vacuumed it (NULL: never since the
-- statistics were reset). Read from the cumulative statistics: one row, no table access.
-- Every claim walks jobs_claim_idx from its start, past the entries of every job claimed
-- since the last vacuum (ADR 0041), so these two numbers say when a vacuum pays.
SELECT n_dead_tup,
    extract(epoch FROM now() - greatest(last_vacuum, last_autovacuum))::float8 AS since_s
FROM pg_stat_user_tables
WHERE relid = 'awa.jobs'::regclass
