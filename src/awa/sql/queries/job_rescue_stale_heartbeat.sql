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
-- A stale job never heartbeated since its claim (every claim writes heartbeat_at =
-- attempted_at; a worker's first beat comes within its heartbeat interval) gets its attempt
-- back instead (end_lost_attempts' p_give_back, migration 0040), once while its errors
-- keep the mark (a NeverHeartbeated entry among the last 20 it keeps: a job whose every
-- claim dies first gets one more run per 21): a claim whose reply was lost with its
-- connection (a pooler restarted, a socket cut) committed on the server, and its job,
-- never run, used up an attempt; with max_attempts = 1 it ended failed without having run
-- (a review). Its worker may also have died before that first beat: once, not again, so
-- a job that kills its worker at once still ends.
-- Expects jobs_running_idx (heartbeat_at) WHERE state = 'running'.
-- Fenced: does nothing unless the given epoch is still the leader lease's (ADR 0019).
WITH stale AS (
    SELECT id, given_back, CASE WHEN given_back
            THEN 'rescued: claimed at ' || attempted_at::text
                || ' and never heartbeated; the attempt is given back (once)'
            ELSE 'rescued: no heartbeat since ' || heartbeat_at::text END AS error
    FROM (
        SELECT id, heartbeat_at, attempted_at,
            (heartbeat_at = attempted_at) IS TRUE  -- a row written by hand may lack either
                AND NOT errors @> '[{"type": "NeverHeartbeated"}]' AS given_back
        FROM awa.jobs
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
    ) AS r
)
SELECT r.id, r.queue, r.kind, r.state
FROM awa.end_lost_attempts(
    (SELECT coalesce(jsonb_object_agg(s.id, s.error), '{}') FROM stale AS s
     WHERE NOT s.given_back),
    'HeartbeatStale'
) AS r
UNION ALL
SELECT r.id, r.queue, r.kind, r.state
FROM awa.end_lost_attempts(
    (SELECT coalesce(jsonb_object_agg(s.id, s.error), '{}') FROM stale AS s WHERE s.given_back),
    'NeverHeartbeated', p_give_back => true
) AS r
