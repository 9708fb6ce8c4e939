-- job_rescue_stale_heartbeat: running jobs whose worker stopped heartbeating (crashed,
-- killed, partitioned) go back to retryable, or to failed on their last attempt so a job
-- that kills its worker every time cannot loop forever. run_lease is bumped so the lost
-- attempt can never complete if its worker comes back.
-- A job is stale once its heartbeat is older than this leader's staleness and than that of
-- every process serving its queue that published a snapshot in the last 5 minutes (its
-- runtime_instances row): a fleet of processes with longer settings sharing the database
-- never has a live job rescued under it (session 24's review).
-- Expects jobs_running_idx (heartbeat_at) WHERE state = 'running'.
-- Fenced: does nothing unless the given epoch is still the leader lease's (ADR 0019).
WITH stale AS (
    SELECT id FROM awa.jobs
    WHERE state = 'running'
      AND heartbeat_at < now() - %(staleness_ms)s::bigint * interval '1 millisecond'
      AND heartbeat_at < now() - interval '1 millisecond' * coalesce((
          SELECT max((i.snapshot ->> 'heartbeat_staleness_ms')::bigint)
          FROM awa.runtime_instances AS i
          WHERE i.last_seen_at > now() - interval '5 minutes'
            AND i.snapshot -> 'queues' ? awa.jobs.queue), 0)
      AND (SELECT awa.leader_holds(%(epoch)s::bigint))
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), rescued AS (
    UPDATE awa.jobs AS j
    SET state = CASE WHEN j.attempt >= j.max_attempts THEN 'failed' ELSE 'retryable' END::awa.job_state,
        finalized_at = CASE WHEN j.attempt >= j.max_attempts THEN now() END,
        run_at = now(),
        run_lease = j.run_lease + 1,
        heartbeat_at = NULL,
        callback_id = NULL, callback_timeout_at = NULL,  -- the lost attempt's callback ends with it
        errors = awa.errors_append(j.errors, jsonb_build_array(jsonb_build_object(
            'error', 'rescued: no heartbeat since ' || j.heartbeat_at::text,
            'attempt', j.attempt, 'at', now(), 'type', 'HeartbeatStale')))
    FROM stale
    WHERE j.id = stale.id
    RETURNING j.id, j.queue, j.kind, j.state
)
-- Their slots of capped queues are announced free (migration 0024).
SELECT r.id, r.queue, r.kind, r.state
FROM rescued AS r
CROSS JOIN (SELECT awa.announce_freed_in(array_agg(DISTINCT r2.queue)) FROM rescued AS r2) AS freed
