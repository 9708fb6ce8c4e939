-- 0029: a completion locks the running rows it finishes in id order, and claims in queue order.
-- Forward-only: never edit a shipped migration; add the next number instead.
--
-- Every statement that changes several running jobs and may wait for one of them must
-- take their row locks in one order, or two of them deadlock: each holds a row the other
-- waits for. The completion's UPDATE locked in whatever order its plan produced (the
-- outcomes' order through a hash join; a nested loop over a bitmap scan, its nearest rival
-- in cost, gives heap order), the heartbeat's in heap order. Unnoticed while each is short,
-- it showed whenever something held the rows for a moment, such as a change of partition_by
-- (which locks a queue's running jobs): 8 deadlocks in 30 s of a 64-handler drain with
-- 200 ms heartbeats. So the completion first locks its rows in id order (``ORDER BY ...
-- FOR UPDATE`` locks after the sort), as the heartbeat, the progress writer, the shutdown
-- fence and the limit writer now do; the UPDATE then finds them held by itself. Rescues
-- lock with SKIP LOCKED and never wait.
-- The claims riding on a completion take advisory locks (a capped queue's claim lock, the
-- fleet pool's lock) in the order the worker listed its queues, so two processes started
-- with the same queues in different orders deadlocked (a review's soak: 12 in 70 s). They
-- now run in one order: pool members first, then by queue name, as a lone claim (the
-- pool's lock, then its queue's) does. complete_and_claim is restated whole (0013's body,
-- with the row locks first and the claims in order).
CREATE OR REPLACE FUNCTION awa.complete_and_claim(
    p_outcomes jsonb, p_synchronous_commit text, p_claims jsonb
) RETURNS TABLE (
    row_type text, claim_queue text,
    id bigint, kind text, queue text, args jsonb, state awa.job_state, priority smallint,
    attempt integer, max_attempts integer, run_lease bigint, tags text[], metadata jsonb,
    progress jsonb, errors jsonb, created_at timestamptz, run_at timestamptz,
    attempted_at timestamptz, deadline_at timestamptz, finalized_at timestamptz,
    ordering_key text, blocked text, retry_in_ms double precision
) LANGUAGE plpgsql VOLATILE SET plan_cache_mode = force_generic_plan AS $$
#variable_conflict use_column
DECLARE
    c        record;
    v_ids    bigint[];
    v_queues text[];  -- the queue of each outcome applied, for the claims' p_freed
BEGIN
    PERFORM set_config('synchronous_commit', p_synchronous_commit, true);
    PERFORM FROM awa.jobs AS j
    WHERE j.id = ANY (ARRAY(
            SELECT (e ->> 'id')::bigint FROM jsonb_array_elements(p_outcomes) AS e))
      AND j.state::text = 'running'
    ORDER BY j.id
    FOR UPDATE;
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
        -- Found by primary key, never through jobs_running_idx: that index holds an entry
        -- for every job run since the last vacuum, and a bitmap scan of it (the plan the
        -- 0008 form got) visits all of them on every call, so each call cost more as a
        -- drain went on (0.97 → 2.3 ms for 8 outcomes over 20 000 jobs). ``state::text``
        -- keeps the planner off that partial index; the ids come as an array so the
        -- lookup is by key whatever the statistics (as in the claim).
        WHERE j.id = ANY (ARRAY(
                SELECT (e ->> 'id')::bigint FROM jsonb_array_elements(p_outcomes) AS e))
          AND j.id = o.id AND j.run_lease = o.run_lease AND j.attempted_at = o.attempted_at
          AND j.state::text = 'running'
        RETURNING j.id, j.queue
    ), unclaimed AS (
        -- A queue with a riding claim announces what that claim leaves (claim_coordinated).
        SELECT d.queue FROM done AS d
        WHERE d.queue NOT IN (
            SELECT r.queue FROM jsonb_to_recordset(p_claims) AS r(queue text))
    ), freed AS (
        -- Only capped queues and pool members are announced (the join keeps plain queues
        -- from calling at all); a notice sent twice in one transaction is delivered once.
        SELECT awa.announce_freed(w.queue, w.capped, w.member)
        FROM (
            SELECT DISTINCT u.queue, l.queue IS NOT NULL AS capped, m.queue IS NOT NULL AS member
            FROM unclaimed AS u
            LEFT JOIN awa.queue_limits AS l ON l.queue = u.queue AND l.concurrency IS NOT NULL
            LEFT JOIN awa.fleet_pool_members AS m ON m.queue = u.queue
        ) AS w
        WHERE w.capped OR w.member
    )
    SELECT coalesce(array_agg(d.id), '{}'), coalesce(array_agg(d.queue), '{}')
    INTO v_ids, v_queues
    FROM done AS d
    WHERE (SELECT count(*) FROM freed) >= 0;
    RETURN QUERY
    SELECT 'applied'::text, NULL::text, d.id, NULL::text, NULL::text, NULL::jsonb,
        NULL::awa.job_state, NULL::smallint, NULL::integer, NULL::integer, NULL::bigint,
        NULL::text[], NULL::jsonb, NULL::jsonb, NULL::jsonb, NULL::timestamptz,
        NULL::timestamptz, NULL::timestamptz, NULL::timestamptz, NULL::timestamptz,
        NULL::text, NULL::text, NULL::float8
    FROM unnest(v_ids) AS d(id);

    FOR c IN
        SELECT r.queue, r."limit", r.deadline_ms, r.instance, r.held
        FROM jsonb_to_recordset(p_claims)
            AS r(queue text, "limit" integer, deadline_ms bigint, instance text, held integer)
        -- The claims' locks in one order for every transaction: pool members first (a
        -- member's claim takes the pool's lock before its queue's), then by queue name.
        ORDER BY NOT EXISTS (SELECT FROM awa.fleet_pool_members AS m WHERE m.queue = r.queue),
            r.queue
    LOOP
        RETURN QUERY
        SELECT 'claimed'::text, c.queue, k.*
        FROM awa.claim(
            c.queue, c."limit", c.deadline_ms, p_synchronous_commit, c.instance, c.held,
            (SELECT count(*)::integer FROM unnest(v_queues) AS f(q) WHERE f.q = c.queue)) AS k;
    END LOOP;
END
$$;
