-- job_retry: make a finished, scheduled or parked job available again now. An exhausted
-- attempt budget is widened by one so the retry can actually run; an aged priority goes
-- back to original_priority (a new wait ages afresh). A job waiting for its
-- callback loses the callback: its id stops resolving (CallbackNotFound), as after a
-- timeout, so a late callback cannot finish a job that is running again.
WITH retried AS (
    UPDATE awa.jobs
    SET state = 'available', run_at = now(), partition_key = NULL, finalized_at = NULL,
        priority = original_priority, heartbeat_at = NULL, callback_id = NULL, callback_timeout_at = NULL,
        max_attempts = greatest(max_attempts, least(attempt + 1, 1000))
    WHERE id = %(id)s
      AND state IN ('scheduled', 'retryable', 'failed', 'cancelled', 'completed',
                    'waiting_external')
      -- not beside another job guarding its unique key: a DLQ entry's is not in
      -- jobs_unique_idx, and the DLQ's own check fires on inserts only (a review: the job
      -- ran beside its dead-lettered twin). job_retry_held_by names the holder.
      AND (unique_key IS NULL OR coalesce(awa.unique_key_holder(unique_key), id) = id)
    RETURNING *
)
SELECT r.*, pg_notify('awa_available', r.queue) AS notified FROM retried AS r
