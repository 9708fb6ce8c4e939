-- 0028: one statement ends an attempt this process or the leader gave up on. The two
-- rescues (stale heartbeat, past deadline) and the shutdown fence each restated the same
-- transition — back to retryable, or failed on the last attempt; run_lease bumped so the
-- lost attempt can never write; heartbeat and callback cleared; the error appended; the
-- freed slots of capped queues announced (0024) — and a change to it had to be made three
-- times. Each now picks its rows (and locks them) and hands them here.
--
-- p_errors: {"<job id>": "<error message>"} for the jobs to end; only those still running
-- change. p_type: the error's type (HeartbeatStale, DeadlineExceeded, Interrupted).
-- Returns the jobs ended, with the state each went to.
CREATE OR REPLACE FUNCTION awa.end_lost_attempts(p_errors jsonb, p_type text)
RETURNS TABLE (id bigint, queue text, kind text, state awa.job_state)
LANGUAGE sql VOLATILE AS $$
    WITH ended AS (
        UPDATE awa.jobs AS j
        SET state = CASE WHEN j.attempt >= j.max_attempts THEN 'failed'
                ELSE 'retryable' END::awa.job_state,
            finalized_at = CASE WHEN j.attempt >= j.max_attempts THEN now() END,
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
