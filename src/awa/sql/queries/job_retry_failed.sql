-- job_retry_failed: bulk retry of failed jobs of one kind and/or queue, each at its
-- original_priority (a new wait ages afresh).
WITH retried AS (
    UPDATE awa.jobs
    SET state = 'available', run_at = now(), partition_key = NULL, finalized_at = NULL,
        priority = original_priority, max_attempts = greatest(max_attempts, least(attempt + 1, 1000))
    WHERE state = 'failed'
      AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
      AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
    RETURNING *
), woken AS (
    SELECT pg_notify('awa_available', queue) FROM (SELECT DISTINCT queue FROM retried) AS q
)
SELECT r.*, (SELECT count(*) FROM woken) AS notified FROM retried AS r
