-- job_retry: make a finished or waiting job available again now. An exhausted attempt
-- budget is widened by one so the retry can actually run.
WITH retried AS (
    UPDATE awa.jobs
    SET state = 'available', run_at = now(), partition_key = NULL, finalized_at = NULL,
        max_attempts = greatest(max_attempts, least(attempt + 1, 1000))
    WHERE id = %(id)s
      AND state IN ('scheduled', 'retryable', 'failed', 'cancelled', 'completed')
    RETURNING *
)
SELECT r.*, pg_notify('awa_available', r.queue) AS notified FROM retried AS r
