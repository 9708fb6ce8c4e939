-- job_fence_attempts: on shutdown, return attempts whose handlers did not stop in time to
-- retryable (or failed on their last attempt) and bump run_lease, so nothing this process
-- claimed stays running and a handler that still finishes later is fenced.
-- Their slots of capped queues are announced free (migration 0024), as a cancel's are.
WITH fenced AS (
    UPDATE awa.jobs AS j
    SET state = CASE WHEN j.attempt >= j.max_attempts THEN 'failed' ELSE 'retryable' END::awa.job_state,
        finalized_at = CASE WHEN j.attempt >= j.max_attempts THEN now() END,
        run_at = now(),
        run_lease = j.run_lease + 1,
        heartbeat_at = NULL,
        callback_id = NULL, callback_timeout_at = NULL,  -- the lost attempt's callback ends with it
        errors = awa.errors_append(j.errors, jsonb_build_array(jsonb_build_object(
            'error', %(reason)s::text, 'attempt', j.attempt, 'at', now(), 'type', 'Interrupted')))
    FROM unnest(%(ids)s::bigint[], %(run_leases)s::bigint[], %(attempted_ats)s::timestamptz[])
        AS f(id, run_lease, attempted_at)
    WHERE j.id = f.id AND j.run_lease = f.run_lease AND j.attempted_at = f.attempted_at
      AND j.state = 'running'
    RETURNING j.id, j.queue
)
SELECT done.id
FROM fenced AS done
CROSS JOIN (SELECT awa.announce_freed_in(array_agg(DISTINCT x.queue)) FROM fenced AS x) AS freed
