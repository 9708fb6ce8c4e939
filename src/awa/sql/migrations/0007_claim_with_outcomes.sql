-- 0007: claims ride on completions (ADR 0012): the statement that records a batch of
-- outcomes also claims the next jobs for the permits those outcomes freed, in the same
-- transaction — one round trip per batch instead of two, and a fleet-capped slot is
-- reused by the process that freed it without waiting for a notice.
-- Forward-only: never edit a shipped migration; add the next number instead.

-- The one claim every path uses: the plain claim for an uncoordinated queue, or
-- claim_coordinated (migration 0003) for a queue under fleet limits or in the fleet pool.
-- Same columns as claim_coordinated: job rows, then maybe one hold row (NULL id).
CREATE FUNCTION awa.claim(
    p_queue text, p_limit integer, p_deadline_ms bigint, p_synchronous_commit text
) RETURNS TABLE (
    id bigint, kind text, queue text, args jsonb, state awa.job_state, priority smallint,
    attempt integer, max_attempts integer, run_lease bigint, tags text[], metadata jsonb,
    progress jsonb, errors jsonb, created_at timestamptz, run_at timestamptz,
    attempted_at timestamptz, deadline_at timestamptz, finalized_at timestamptz,
    blocked text, retry_in_ms double precision
) LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
BEGIN
    IF EXISTS (SELECT 1 FROM awa.queue_limits AS l WHERE l.queue = p_queue)
       OR EXISTS (SELECT 1 FROM awa.fleet_pool_members AS m WHERE m.queue = p_queue) THEN
        RETURN QUERY SELECT * FROM awa.claim_coordinated(
            p_queue, p_limit, p_deadline_ms, p_synchronous_commit);
        RETURN;
    END IF;
    PERFORM set_config('synchronous_commit', p_synchronous_commit, true);
    IF p_limit < 1 OR EXISTS (
        SELECT 1 FROM awa.queue_meta AS m WHERE m.queue = p_queue AND m.paused
    ) THEN
        RETURN;
    END IF;
    -- The plain claim (job_claim_available.sql says why it has this shape): the next
    -- jobs in dispatch order on jobs_claim_idx, rows other claimers hold skipped, each
    -- claim a new attempt (attempt and run_lease + 1) fenced by (run_lease, attempted_at).
    -- Matched by id = ANY(array): an index lookup whatever the table's statistics.
    RETURN QUERY
    UPDATE awa.jobs AS j
    SET state = 'running', attempt = j.attempt + 1, run_lease = j.run_lease + 1,
        attempted_at = now(), heartbeat_at = now(),
        deadline_at = CASE WHEN p_deadline_ms > 0
            THEN now() + p_deadline_ms * interval '1 millisecond' END
    WHERE j.id = ANY (ARRAY(
        SELECT a.id FROM awa.jobs AS a
        WHERE a.state = 'available' AND a.queue = p_queue AND a.partition_key IS NULL
        ORDER BY a.priority, a.run_at, a.id
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    ))
    RETURNING j.id, j.kind, j.queue, j.args, j.state, j.priority, j.attempt, j.max_attempts,
        j.run_lease, j.tags, nullif(j.metadata, '{}'::jsonb), j.progress,
        nullif(j.errors, '[]'::jsonb), j.created_at, j.run_at, j.attempted_at, j.deadline_at,
        j.finalized_at, NULL::text, NULL::float8;
END
$$;

-- Record a batch of outcomes, then claim for the queues that ask in p_claims
-- ([{queue, limit, deadline_ms}]), all in one transaction. The outcomes are those of
-- job_finalize_many (lease-guarded: a stale attempt changes nothing) and free fleet slots
-- the claims below can use at once (same transaction, so a capped count sees them gone).
-- A job leaving `running` in a queue with a fleet concurrency cap or in the fleet pool
-- also wakes the fleet's waiting claimers: awa_control {"freed": queue} for that queue
-- (for the pool, for every member), sent when the transaction commits (ADR 0010).
-- Rows: ('applied', id) per outcome that took effect; ('claimed', job columns) per job
-- claimed and ('claimed', NULL id, blocked, retry_in_ms) when the fleet held a claim back
-- — the claim's queue is in the job columns, or in `claim_queue` for a hold.
CREATE FUNCTION awa.complete_and_claim(
    p_outcomes jsonb, p_synchronous_commit text, p_claims jsonb
) RETURNS TABLE (
    row_type text, claim_queue text,
    id bigint, kind text, queue text, args jsonb, state awa.job_state, priority smallint,
    attempt integer, max_attempts integer, run_lease bigint, tags text[], metadata jsonb,
    progress jsonb, errors jsonb, created_at timestamptz, run_at timestamptz,
    attempted_at timestamptz, deadline_at timestamptz, finalized_at timestamptz,
    blocked text, retry_in_ms double precision
) LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
    c record;
BEGIN
    PERFORM set_config('synchronous_commit', p_synchronous_commit, true);
    RETURN QUERY
    WITH done AS (
        UPDATE awa.jobs AS j
        SET state = o.state,
            run_at = CASE WHEN o.delay_ms IS NULL THEN j.run_at
                ELSE now() + o.delay_ms * interval '1 millisecond' END,
            finalized_at = CASE WHEN o.state IN ('completed', 'failed', 'cancelled')
                THEN now() END,
            attempt = CASE WHEN o.refund THEN j.attempt - 1 ELSE j.attempt END,
            errors = CASE WHEN o.error IS NULL THEN j.errors
                ELSE awa.errors_append(j.errors,
                    jsonb_build_array(o.error || jsonb_build_object('at', now())))
                END,
            progress = CASE WHEN o.state = 'completed' THEN NULL
                ELSE coalesce(o.progress, j.progress) END,
            metadata = CASE WHEN o.metadata IS NULL THEN j.metadata
                ELSE j.metadata || o.metadata END,
            heartbeat_at = NULL
        FROM jsonb_to_recordset(p_outcomes) AS o(
            id bigint, run_lease bigint, attempted_at timestamptz, state awa.job_state,
            delay_ms float8, refund boolean, error jsonb, progress jsonb, metadata jsonb
        )
        WHERE j.id = o.id AND j.run_lease = o.run_lease AND j.attempted_at = o.attempted_at
          AND j.state = 'running'
        RETURNING j.id, j.queue
    ), freed AS (
        SELECT pg_notify('awa_control', json_build_object('freed', w.queue)::text)
        FROM (
            SELECT l.queue FROM awa.queue_limits AS l
            WHERE l.concurrency IS NOT NULL AND l.queue IN (SELECT d.queue FROM done AS d)
            UNION
            SELECT p.queue FROM awa.fleet_pool_members AS p
            WHERE EXISTS (SELECT 1 FROM done AS d JOIN awa.fleet_pool_members AS m
                          ON m.queue = d.queue)
        ) AS w
    )
    SELECT 'applied'::text, NULL::text, d.id, NULL::text, NULL::text, NULL::jsonb,
        NULL::awa.job_state, NULL::smallint, NULL::integer, NULL::integer, NULL::bigint,
        NULL::text[], NULL::jsonb, NULL::jsonb, NULL::jsonb, NULL::timestamptz,
        NULL::timestamptz, NULL::timestamptz, NULL::timestamptz, NULL::timestamptz,
        NULL::text, NULL::float8
    FROM done AS d
    WHERE (SELECT count(*) FROM freed) >= 0;

    FOR c IN
        SELECT r.queue, r."limit", r.deadline_ms
        FROM jsonb_to_recordset(p_claims) AS r(queue text, "limit" integer, deadline_ms bigint)
    LOOP
        RETURN QUERY
        SELECT 'claimed'::text, c.queue, k.*
        FROM awa.claim(c.queue, c."limit", c.deadline_ms, p_synchronous_commit) AS k;
    END LOOP;
END
$$;
