-- jobs_vacuum: clear the dead entries out of awa.jobs and its indexes (ADR 0041).
-- SKIP_LOCKED: when a vacuum (autovacuum's) already runs, skip rather than queue behind
-- it. INDEX_CLEANUP ON: the point is the indexes, which the default (AUTO) may leave
-- alone when few heap pages hold dead rows. TRUNCATE OFF: giving back the table's empty
-- tail takes an ACCESS EXCLUSIVE lock, which would stop every claim for its length.
-- Runs outside a transaction block (autocommit), as VACUUM must.
VACUUM (SKIP_LOCKED, INDEX_CLEANUP ON, TRUNCATE OFF) awa.jobs
