-- 0011: a fleet-pool member's share is split over the processes serving it (ADR 0037).
-- Forward-only: never edit a shipped migration; add the next number instead.
--
-- The pool bounds each member fleet-wide, but said nothing of which process runs the
-- member's jobs. The process that frees a slot re-fills it in the same statement (its
-- claim rides on the completion, ADR 0012), and since 0009 a woken claimer elsewhere is
-- told at once there is no room; so one process could keep every slot of a member while
-- another serving it sat idle (clean-clone CI of 63ffe6d: one process ran all of ``a``).
-- Now a claim of a pool member says which process asks and how many of the member's
-- jobs that process holds already; the claim is cut to that process's part of the
-- member's share: the share over the live processes serving the member, rounded up, or
-- more when the others cannot take theirs (their own max_workers), so no slot of the
-- pool is left unused for balance's sake. A claim cut short ends with a ``pool`` hold
-- row, so its dispatcher waits for the next ``freed`` notice as for any pool hold.
--
-- The processes serving a member are the runtime instances seen in the last 30 seconds
-- (three publishing cadences at the default 10 s) whose snapshot lists the queue. A
-- process that dies keeps its part reserved until its row goes stale; one that shuts
-- down removes its row as it leaves.
--
-- awa.claim and complete_and_claim gain the two values and are restated whole (their
-- signatures change); both keep 0010's generic plans.

DROP FUNCTION awa.complete_and_claim(jsonb, text, jsonb);
DROP FUNCTION awa.claim(text, integer, bigint, text);
DROP FUNCTION awa.claim_coordinated(text, integer, bigint, text);

-- This process's part of a member's share (``p_share``: the jobs the member may run now,
-- fleet-wide): an even split over the live processes serving the member, rounded up,
-- raised by what the others cannot take for want of workers of their own.
CREATE FUNCTION awa.pool_process_part(p_queue text, p_instance text, p_share integer)
RETURNS integer LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_caps   integer[];  -- each other process's max_workers for the queue (NULL: none)
    v_fair   integer;
    v_others bigint;
BEGIN
    SELECT coalesce(array_agg(
            (i.snapshot #>> ARRAY['queues', p_queue, 'capacity', 'max_workers'])::integer),
        '{}')
    INTO v_caps
    FROM awa.runtime_instances AS i
    WHERE i.last_seen_at > now() - interval '30 seconds'
      AND i.instance_id::text <> p_instance
      AND i.snapshot -> 'queues' ? p_queue;
    v_fair := ceil(p_share::numeric / (cardinality(v_caps) + 1));
    SELECT coalesce(sum(least(v_fair, coalesce(c.cap, v_fair))), 0) INTO v_others
    FROM unnest(v_caps) AS c(cap);
    RETURN greatest(v_fair, p_share - v_others);
END
$$;

-- The 0009 wrapper, now also cutting a member's claim to the asking process's part.
CREATE FUNCTION awa.claim_coordinated(
    p_queue text, p_limit integer, p_deadline_ms bigint, p_synchronous_commit text,
    p_instance text DEFAULT NULL, p_held integer DEFAULT NULL
) RETURNS TABLE (
    id bigint, kind text, queue text, args jsonb, state awa.job_state, priority smallint,
    attempt integer, max_attempts integer, run_lease bigint, tags text[], metadata jsonb,
    progress jsonb, errors jsonb, created_at timestamptz, run_at timestamptz,
    attempted_at timestamptz, deadline_at timestamptz, finalized_at timestamptz,
    ordering_key text, blocked text, retry_in_ms double precision
) LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
    v_now   timestamptz := clock_timestamp();
    v_room  integer;
    v_limit integer := p_limit;
BEGIN
    IF p_limit >= 1
       AND EXISTS (SELECT 1 FROM awa.fleet_pool_members AS m WHERE m.queue = p_queue)
       AND NOT EXISTS (SELECT 1 FROM awa.queue_meta AS m WHERE m.queue = p_queue AND m.paused)
    THEN
        v_room := awa.pool_room(p_queue, v_now);
        IF v_room > 0 AND p_instance IS NOT NULL THEN
            v_limit := least(p_limit, awa.pool_process_part(p_queue, p_instance, v_room + (
                SELECT count(*)::integer FROM awa.jobs AS r
                WHERE r.queue = p_queue AND r.state = 'running')) - coalesce(p_held, 0));
        END IF;
        IF v_room <= 0 OR v_limit <= 0 THEN
            -- The demand signal, as the locked claim writes it: others' shares shrink for it.
            UPDATE awa.fleet_pool_members AS m SET asked_at = v_now
            WHERE m.queue = p_queue
              AND (m.asked_at IS NULL OR m.asked_at < v_now - interval '1 second');
            blocked := 'pool';
            RETURN NEXT;
            RETURN;
        END IF;
    END IF;
    IF v_limit < p_limit THEN
        -- Cut to this process's part: a claim that got all of it ends with a pool hold.
        RETURN QUERY
        WITH k AS (
            SELECT * FROM awa.claim_coordinated_locked(
                p_queue, v_limit, p_deadline_ms, p_synchronous_commit)
        )
        SELECT * FROM k
        UNION ALL
        SELECT NULL::bigint, NULL::text, NULL::text, NULL::jsonb, NULL::awa.job_state,
            NULL::smallint, NULL::integer, NULL::integer, NULL::bigint, NULL::text[],
            NULL::jsonb, NULL::jsonb, NULL::jsonb, NULL::timestamptz, NULL::timestamptz,
            NULL::timestamptz, NULL::timestamptz, NULL::timestamptz, NULL::text,
            'pool'::text, NULL::float8
        WHERE (SELECT count(*) FROM k WHERE k.id IS NOT NULL) >= v_limit;
        RETURN;
    END IF;
    RETURN QUERY SELECT * FROM awa.claim_coordinated_locked(
        p_queue, p_limit, p_deadline_ms, p_synchronous_commit);
END
$$;

-- The one claim (0008), passing who asks and what it holds to claim_coordinated.
CREATE FUNCTION awa.claim(
    p_queue text, p_limit integer, p_deadline_ms bigint, p_synchronous_commit text,
    p_instance text DEFAULT NULL, p_held integer DEFAULT NULL
) RETURNS TABLE (
    id bigint, kind text, queue text, args jsonb, state awa.job_state, priority smallint,
    attempt integer, max_attempts integer, run_lease bigint, tags text[], metadata jsonb,
    progress jsonb, errors jsonb, created_at timestamptz, run_at timestamptz,
    attempted_at timestamptz, deadline_at timestamptz, finalized_at timestamptz,
    ordering_key text, blocked text, retry_in_ms double precision
) LANGUAGE plpgsql VOLATILE SET plan_cache_mode = force_generic_plan AS $$
#variable_conflict use_column
DECLARE
    v_coordinated boolean;
    v_paused      boolean;
    v_ordered     boolean;
    v_heads       bigint[];
BEGIN
    -- One statement decides the path (and sets the commit mode, which 0007 did in one of
    -- its own): fleet limits or pool membership, a pause, and ordered jobs waiting (a probe
    -- of jobs_ordered_claim_idx, empty for most queues). As guards inside the claim below
    -- they cost more: that statement was then planned afresh on every call.
    SELECT EXISTS (SELECT 1 FROM awa.queue_limits AS l WHERE l.queue = p_queue)
            OR EXISTS (SELECT 1 FROM awa.fleet_pool_members AS m WHERE m.queue = p_queue),
        EXISTS (SELECT 1 FROM awa.queue_meta AS m WHERE m.queue = p_queue AND m.paused),
        EXISTS (SELECT 1 FROM awa.jobs AS o
                WHERE o.queue = p_queue AND o.state = 'available'
                  AND o.partition_key IS NULL AND o.ordering_key IS NOT NULL)
    INTO v_coordinated, v_paused, v_ordered
    FROM set_config('synchronous_commit', p_synchronous_commit, true);
    IF v_coordinated THEN
        RETURN QUERY SELECT * FROM awa.claim_coordinated(
            p_queue, p_limit, p_deadline_ms, p_synchronous_commit, p_instance, p_held);
        RETURN;
    END IF;
    IF p_limit < 1 OR v_paused THEN
        RETURN;
    END IF;
    IF NOT v_ordered THEN
        -- The plain claim (job_claim_available.sql says why it has this shape): the next
        -- jobs in dispatch order on jobs_claim_idx, rows other claimers hold skipped, each
        -- claim a new attempt (attempt and run_lease + 1) fenced by (run_lease,
        -- attempted_at). Matched by id = ANY(array): an index lookup whatever the
        -- table's statistics.
        RETURN QUERY
        UPDATE awa.jobs AS j
        SET state = 'running', attempt = j.attempt + 1, run_lease = j.run_lease + 1,
            attempted_at = now(), heartbeat_at = now(),
            deadline_at = CASE WHEN p_deadline_ms > 0
                THEN now() + p_deadline_ms * interval '1 millisecond' END
        WHERE j.id = ANY (ARRAY(
            SELECT a.id FROM awa.jobs AS a
            WHERE a.state = 'available' AND a.queue = p_queue AND a.partition_key IS NULL
              AND a.ordering_key IS NULL
            ORDER BY a.priority, a.run_at, a.id
            LIMIT p_limit
            FOR UPDATE SKIP LOCKED
        ))
        RETURNING j.id, j.kind, j.queue, j.args, j.state, j.priority, j.attempt,
            j.max_attempts, j.run_lease, j.tags, nullif(j.metadata, '{}'::jsonb), j.progress,
            nullif(j.errors, '[]'::jsonb), j.created_at, j.run_at, j.attempted_at,
            j.deadline_at, j.finalized_at, j.ordering_key, NULL::text, NULL::float8;
        RETURN;
    END IF;
    -- Ordered jobs wait in this queue: the keys' turns that rank within the limit (their
    -- keys locked), then, in a statement whose snapshot follows those locks, the heads
    -- re-checked and plain jobs for the rest of the limit.
    v_heads := awa.ordering_pick(p_queue, p_limit);
    RETURN QUERY
    UPDATE awa.jobs AS j
    SET state = 'running', attempt = j.attempt + 1, run_lease = j.run_lease + 1,
        attempted_at = now(), heartbeat_at = now(),
        deadline_at = CASE WHEN p_deadline_ms > 0
            THEN now() + p_deadline_ms * interval '1 millisecond' END
    WHERE j.id = ANY (ARRAY(
        SELECT a.id FROM awa.jobs AS a
        WHERE a.state = 'available' AND a.queue = p_queue AND a.partition_key IS NULL
          AND a.ordering_key IS NULL
        ORDER BY a.priority, a.run_at, a.id
        LIMIT p_limit - cardinality(v_heads)
        FOR UPDATE SKIP LOCKED
    ) || ARRAY(
        SELECT a.id FROM awa.jobs AS a
        WHERE a.id = ANY (v_heads) AND a.state = 'available'
          AND awa.ordering_ready(a.ordering_key, a.id)
        FOR UPDATE SKIP LOCKED
    ))
    RETURNING j.id, j.kind, j.queue, j.args, j.state, j.priority, j.attempt,
        j.max_attempts, j.run_lease, j.tags, nullif(j.metadata, '{}'::jsonb), j.progress,
        nullif(j.errors, '[]'::jsonb), j.created_at, j.run_at, j.attempted_at,
        j.deadline_at, j.finalized_at, j.ordering_key, NULL::text, NULL::float8;
END
$$;

-- complete_and_claim (0009), passing each riding claim's process and holding.
CREATE FUNCTION awa.complete_and_claim(
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
        NULL::text, NULL::text, NULL::float8
    FROM done AS d
    WHERE (SELECT count(*) FROM freed) >= 0;

    FOR c IN
        SELECT r.queue, r."limit", r.deadline_ms, r.instance, r.held
        FROM jsonb_to_recordset(p_claims)
            AS r(queue text, "limit" integer, deadline_ms bigint, instance text, held integer)
    LOOP
        RETURN QUERY
        SELECT 'claimed'::text, c.queue, k.*
        FROM awa.claim(
            c.queue, c."limit", c.deadline_ms, p_synchronous_commit, c.instance, c.held) AS k;
    END LOOP;
END
$$;
