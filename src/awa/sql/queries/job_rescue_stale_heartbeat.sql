-- job_rescue_stale_heartbeat: running jobs whose worker stopped heartbeating (crashed,
-- killed, partitioned) go back to retryable, or to failed on their last attempt so a job
-- that kills its worker every time cannot loop forever; the lost attempt is fenced
-- (awa.end_lost_attempts, migration 0028), so it can never complete if its worker comes
-- back.
-- A job is stale once its heartbeat is older than this leader's staleness and than that of
-- every process serving its queue whose snapshot is still kept (its runtime_instances row,
-- seen within %(instances_kept_ms)s, the time the leader keeps a silent process's row): a
-- fleet of processes with longer settings sharing the database never has a live job
-- rescued under it (session 24's review).
-- Expects jobs_running_idx (heartbeat_at) WHERE state = 'running'.
-- Fenced: does nothing unless the given epoch is still the leader lease's (ADR 0019).
WITH stale AS (
    SELECT id, 'rescued: no heartbeat since ' || heartbeat_at::text AS error FROM awa.jobs
    WHERE state = 'running'
      AND heartbeat_at < now() - %(staleness_ms)s::bigint * interval '1 millisecond'
      AND heartbeat_at < now() - interval '1 millisecond' * coalesce((
          SELECT max((i.snapshot ->> 'heartbeat_staleness_ms')::bigint)
          FROM awa.runtime_instances AS i
          WHERE i.last_seen_at > now() - %(instances_kept_ms)s::bigint * interval '1 millisecond'
            AND i.snapshot -> 'queues' ? awa.jobs.queue), 0)
      AND (SELECT awa.leader_holds(%(epoch)s::bigint))
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
SELECT r.id, r.queue, r.kind, r.state
FROM awa.end_lost_attempts(
    (SELECT coalesce(jsonb_object_agg(s.id, s.error), '{}') FROM stale AS s), 'HeartbeatStale'
) AS r
