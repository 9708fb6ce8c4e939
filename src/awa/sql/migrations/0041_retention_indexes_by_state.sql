-- 0041: retention pruning reads one index per retention, not the whole table.
-- Forward-only: never edit a shipped migration; add the next number instead.
--
-- The pruner deletes completed jobs past completed_retention_ms and failed or cancelled
-- ones past failed_retention_ms. Through jobs_finalized_idx (every finished row, any
-- state) the two bounds could not be told apart in the index: with the defaults (24 h, 7
-- days) failed and cancelled jobs between one and seven days old are the steady state,
-- all of them under the completed bound, and the planner, expecting them to match,
-- scanned the whole table every minute to find none (a review: 668 ms a call at 2.6
-- million rows, growing with the table). One partial index per retention lets each
-- bound be a range scan in finalized_at order that stops at its batch. Every finished row
-- is in exactly one of them, as it was in jobs_finalized_idx: a completion writes no more.
-- (IF NOT EXISTS: applying it again changes nothing.)
CREATE INDEX IF NOT EXISTS jobs_prune_completed_idx ON awa.jobs (finalized_at) WHERE state = 'completed';
CREATE INDEX IF NOT EXISTS jobs_prune_failed_idx ON awa.jobs (finalized_at)
    WHERE state IN ('failed', 'cancelled');
DROP INDEX IF EXISTS awa.jobs_finalized_idx;
