-- job_retry_failed: bulk retry of failed jobs of one kind and/or queue, each at its
-- original_priority (a new wait ages afresh).
-- The rows are locked in id order before any changes (ADR 0050): in the plan's order
-- (an index's, or the heap's) it deadlocked with a concurrent discard or move to the DLQ.
-- A failed job whose unique key another job now guards (inserted after this one left its
-- guarded states; or a DLQ entry, migration 0031) is left failed, and of failed jobs
-- sharing a key only the first is retried: retried, each would duplicate a job, and one
-- such job failed the whole statement — no job retried, and a UniqueConflict naming
-- neither (a review; as ADR 0051 for the DLQ). job_retry_failed_held_back names them.
WITH doomed AS (
    SELECT id, unique_key FROM awa.jobs
    WHERE state = 'failed'
      AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
      AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
    ORDER BY id
    FOR UPDATE
), first_of_key AS (
    SELECT min(id) AS id FROM doomed WHERE unique_key IS NOT NULL GROUP BY unique_key
), retried AS (
    UPDATE awa.jobs AS j
    SET state = 'available', run_at = now(), partition_key = NULL, finalized_at = NULL,
        priority = original_priority, max_attempts = greatest(max_attempts, least(attempt + 1, 1000))
    WHERE j.state = 'failed'
      AND (%(kind)s::text IS NULL OR j.kind = %(kind)s::text)
      AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
      AND (SELECT count(*) FROM doomed) >= 0  -- a gate the update passes once
      AND (j.unique_key IS NULL
           OR (j.id IN (SELECT f.id FROM first_of_key AS f)
               AND coalesce(awa.unique_key_holder(j.unique_key), j.id) = j.id))
    RETURNING j.*
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
