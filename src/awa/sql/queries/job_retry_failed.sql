-- job_retry_failed: bulk retry of failed jobs of one kind and/or queue, each at its
-- original_priority (a new wait ages afresh).
-- The rows are locked in id order before any changes (ADR 0050): in the plan's order
-- (an index's, or the heap's) it deadlocked with a concurrent discard or move to the DLQ.
WITH doomed AS (
    SELECT id FROM awa.jobs
    WHERE state = 'failed'
      AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
      AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
    ORDER BY id
    FOR UPDATE
), retried AS (
    UPDATE awa.jobs
    SET state = 'available', run_at = now(), partition_key = NULL, finalized_at = NULL,
        priority = original_priority, max_attempts = greatest(max_attempts, least(attempt + 1, 1000))
    WHERE state = 'failed'
      AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
      AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
      AND (SELECT count(*) FROM doomed) >= 0  -- a gate the update passes once
    RETURNING *
), woken AS (
    SELECT pg_notify('awa_available', queue) FROM (SELECT DISTINCT queue FROM retried) AS q
)
-- Either the retried jobs (the API), or how many (the CLI and the dashboard, which show a
-- count: 500 000 jobs built for one took 1.4 GB, a review).
-- rows {
SELECT r.*, (SELECT count(*) FROM woken) AS notified FROM retried AS r
-- } rows
-- count {
SELECT count(*) AS retried, (SELECT count(*) FROM woken) AS notified FROM retried
-- } count
