-- job_promote_due: make scheduled and retryable jobs whose run_at has come available,
-- and wake each affected queue once. Run by the maintenance leader. Priority goes back to
-- original_priority: priority aging counts from the new wait, not the earlier one. The
-- partition key goes back to NULL: a partitioned queue's claimer adopts the job afresh
-- under the queue's partition_by of that moment (ADR 0010).
-- Expects jobs_due_idx (run_at) WHERE state IN ('scheduled', 'retryable').
-- Fenced: does nothing unless the given epoch is still the leader lease's (ADR 0019).
WITH due AS (
    SELECT id FROM awa.jobs
    WHERE state IN ('scheduled', 'retryable') AND run_at <= now()
      AND (SELECT awa.leader_holds(%(epoch)s::bigint))
    ORDER BY run_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), promoted AS (
    UPDATE awa.jobs AS j
    SET state = 'available', priority = j.original_priority, partition_key = NULL
    FROM due WHERE j.id = due.id
    RETURNING j.queue
)
SELECT queue, count(*) AS promoted, pg_notify('awa_available', queue) AS notified
FROM promoted
GROUP BY queue
