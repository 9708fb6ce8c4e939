-- job_rescue_past_deadline: running jobs past deadline_at (plus a grace period, so the
-- worker that runs them can stop them first) go back to retryable, or failed on their
-- last attempt, their overdue attempt fenced (awa.end_lost_attempts, migration 0028).
-- Scans jobs_running_idx: running jobs are few (bounded by the fleet's permits).
-- Fenced: does nothing unless the given epoch is still the leader lease's (ADR 0019).
WITH overdue AS (
    SELECT id, 'rescued: deadline passed at ' || deadline_at::text AS error FROM awa.jobs
    WHERE state = 'running' AND deadline_at IS NOT NULL
      AND deadline_at < now() - %(grace_ms)s::bigint * interval '1 millisecond'
      AND (SELECT awa.leader_holds(%(epoch)s::bigint))
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
SELECT r.id, r.queue, r.kind, r.state
FROM awa.end_lost_attempts(
    (SELECT coalesce(jsonb_object_agg(o.id, o.error), '{}') FROM overdue AS o), 'DeadlineExceeded'
) AS r
