-- 0040: awa.end_lost_attempts can give the lost attempt back.
-- Forward-only: never edit a shipped migration; add the next number instead.
--
-- A claim whose reply was lost with its connection (a pooler restarted, a socket cut)
-- commits on the server, and no worker runs its jobs: the heartbeat rescue took them as
-- crashed and spent their attempt, so a job with max_attempts = 1 ended failed without
-- having run (a review, through a real PgBouncer). The rescue now gives such an attempt
-- back (job_rescue_stale_heartbeat.sql says which); the transition stays in this one place
-- (0028), with p_give_back: the attempt number goes back by one, and the job is retryable
-- whatever its attempts, since the attempt never counted. Everything else — the lease
-- bumped so the lost attempt can never write, heartbeat and callback cleared, the error
-- appended, the freed slots announced — is the same. Callers that pass two arguments
-- (every other path, and the previous release's SQL) get p_give_back = false.
DROP FUNCTION IF EXISTS awa.end_lost_attempts(jsonb, text);
CREATE OR REPLACE FUNCTION awa.end_lost_attempts(
    p_errors jsonb, p_type text, p_give_back boolean DEFAULT false
)
RETURNS TABLE (id bigint, queue text, kind text, state awa.job_state)
LANGUAGE sql VOLATILE AS $$
    WITH ended AS (
        UPDATE awa.jobs AS j
        SET state = CASE WHEN j.attempt >= j.max_attempts AND NOT p_give_back THEN 'failed'
                ELSE 'retryable' END::awa.job_state,
            finalized_at = CASE WHEN j.attempt >= j.max_attempts AND NOT p_give_back
                THEN now() END,
            attempt = CASE WHEN p_give_back THEN j.attempt - 1 ELSE j.attempt END,
            run_at = now(),
            run_lease = j.run_lease + 1,
            heartbeat_at = NULL,
            callback_id = NULL, callback_timeout_at = NULL,  -- the callback ends with it
            errors = awa.errors_append(j.errors, jsonb_build_array(jsonb_build_object(
                'error', p_errors ->> j.id::text, 'attempt', j.attempt, 'at', now(),
                'type', p_type)))
        WHERE j.id = ANY (ARRAY(SELECT k::bigint FROM jsonb_object_keys(p_errors) AS k))
          AND j.state = 'running'
        RETURNING j.id, j.queue, j.kind, j.state
    )
    SELECT e.id, e.queue, e.kind, e.state
    FROM ended AS e
    CROSS JOIN (SELECT awa.announce_freed_in(array_agg(DISTINCT x.queue)) FROM ended AS x) AS freed
$$;
