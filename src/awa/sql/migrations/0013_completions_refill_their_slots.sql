-- 0013: a completion re-fills the slots it frees without the fleet's locks (ADR 0040).
-- Forward-only: never edit a shipped migration; add the next number instead.
--
-- A claim riding on a completion (ADR 0012) of a queue under a fleet cap, or of a fleet
-- pool member, queued for the queue's lock (and the pool's) behind every other process's
-- completion, each holding it until its commit: 0.3-1.2 s of lock waits per W6 run and
-- per fleet-pool drain. Yet a claim that takes no more of a queue's jobs than the same
-- transaction has just finished of that queue cannot raise the queue's running count:
-- both changes become visible at one commit, so every snapshot, the locked counts of
-- other claimers included, sees the count as before or as after, never above it. Such a
-- "swap" needs no lock for the cap or the pool's total, only for what the locks also
-- decide: a cap lowered below the running count (the swap is cut to the cap, from a
-- count that sees this transaction's completions), the pool's shares and this process's
-- part (cut as before, from unlocked reads, as 0009 and 0011 do), and what only the
-- locked claim can do (a cap per key, a rate limit, ordered jobs waiting: no swap).
-- What the swap leaves of the claim's limit is claimed as before.
--
-- complete_and_claim counts what its outcomes finished per queue and passes it to each
-- riding claim as ``p_freed``; a stand-alone claim passes nothing and is unchanged.
-- awa.claim gains the parameter only to pass it on, and passes claim_coordinated its own
-- probe for ordered jobs (``p_ordered``) rather than have the swap probe again. The three
-- are restated whole (their signatures change); claim and complete_and_claim keep 0010's
-- generic plans.
--
-- The ``freed`` notice (0010) now goes out only for slots not re-filled: from the
-- completion for queues it finished without a riding claim, from claim_coordinated when
-- the swap took fewer than were freed. Waking the other processes' claimers for a slot
-- the rider had already re-filled was most of W6's remaining claim work.

DROP FUNCTION awa.complete_and_claim(jsonb, text, jsonb);
DROP FUNCTION awa.claim(text, integer, bigint, text, text, integer);
DROP FUNCTION awa.claim_coordinated(text, integer, bigint, text, text, integer);

-- "Has the queue an available job?" as probes that walk the claim indexes in their own
-- order. Written as EXISTS they were planned (generic plans, 0010) as a sequential scan
-- whenever the statistics said most rows are available, one that reads every row stored
-- before the queue's first available job: 1.6 ms per probe with 6 000 rows of another
-- queue ahead of it, and more with every finished job a table keeps. A scalar subquery
-- with the index's ORDER BY and LIMIT 1 is an index scan whatever the statistics (the
-- planner drops ORDER BY and LIMIT inside EXISTS). Written out where used: a SQL function
-- holding a subquery is not inlined, and planning it on every call cost more than the
-- probe (0.18 ms).
-- pool_room (0009) with the member probes written so; otherwise unchanged.
CREATE OR REPLACE FUNCTION awa.pool_room(p_queue text, p_now timestamptz)
RETURNS integer LANGUAGE plpgsql STABLE AS $$
DECLARE
    m                 record;
    v_total           integer;
    v_running         integer;
    v_sum_min         bigint := 0;
    v_others_reserved bigint := 0;
    v_settled         bigint := 0;
    v_asking_weight   bigint := 0;
    v_me_min          integer;
    v_me_running      integer;
    v_overflow        bigint;
    v_queues          text[] := '{}';  -- the asking members
    v_weights         bigint[] := '{}';
    v_me_part         integer;
BEGIN
    SELECT f.total INTO v_total FROM awa.fleet_pool AS f;
    IF v_total IS NULL THEN
        RETURN NULL;
    END IF;
    FOR m IN
        SELECT p.queue, p.min_workers, p.weight, p.asked_at FROM awa.fleet_pool_members AS p
    LOOP
        SELECT count(*) INTO v_running
        FROM awa.jobs AS r WHERE r.queue = m.queue AND r.state = 'running';
        v_sum_min := v_sum_min + m.min_workers;
        -- A member asks while it has available jobs on any of the three claim indexes.
        IF m.queue = p_queue OR (m.asked_at > p_now - interval '5 seconds' AND (
            (SELECT a.id FROM awa.jobs AS a
             WHERE a.queue = m.queue AND a.state = 'available' AND a.partition_key IS NULL
               AND a.ordering_key IS NULL
             ORDER BY a.priority, a.run_at, a.id LIMIT 1) IS NOT NULL
            OR (SELECT a.id FROM awa.jobs AS a
                WHERE a.queue = m.queue AND a.state = 'available' AND a.partition_key IS NULL
                  AND a.ordering_key IS NOT NULL
                ORDER BY a.priority, a.run_at, a.id LIMIT 1) IS NOT NULL
            OR (SELECT a.id FROM awa.jobs AS a
                WHERE a.queue = m.queue AND a.state = 'available' AND a.partition_key IS NOT NULL
                ORDER BY a.partition_key, a.priority, a.run_at, a.id LIMIT 1) IS NOT NULL))
        THEN
            v_asking_weight := v_asking_weight + m.weight;
            v_queues := v_queues || m.queue;
            v_weights := v_weights || m.weight::bigint;
        ELSE
            v_settled := v_settled + greatest(0, v_running - m.min_workers);
        END IF;
        IF m.queue = p_queue THEN
            v_me_min := m.min_workers;
            v_me_running := v_running;
        ELSE
            v_others_reserved := v_others_reserved + greatest(v_running, m.min_workers);
        END IF;
    END LOOP;
    IF v_me_min IS NULL THEN  -- not a member
        RETURN NULL;
    END IF;
    v_overflow := greatest(v_total - v_sum_min - v_settled, 0);
    -- Each asking member's exact part, rounded down; the slots left over go one each to
    -- the largest remainders (ties by queue name).
    WITH parts AS (
        SELECT a.q, floor(a.exact) AS part, a.exact - floor(a.exact) AS rest
        FROM unnest(v_queues, v_weights) AS w(q, weight),
            LATERAL (SELECT w.q, v_overflow::numeric * w.weight / v_asking_weight AS exact) AS a
    ), ranked AS (
        SELECT p.q, p.part, row_number() OVER (ORDER BY p.rest DESC, p.q) AS place
        FROM parts AS p
    )
    SELECT r.part + (r.place <= v_overflow - (SELECT sum(p.part) FROM parts AS p))::integer
    INTO v_me_part
    FROM ranked AS r WHERE r.q = p_queue;
    RETURN least(
        v_total - v_others_reserved - v_me_running,
        v_me_min + v_me_part - v_me_running);
END
$$;

-- The ``freed`` notice (0010) for slots of ``p_queue`` a transaction freed: the queue if
-- it has a fleet cap, and every member if it is in the fleet pool (room in the pool is
-- room for each of them).
CREATE FUNCTION awa.announce_freed(p_queue text, p_capped boolean, p_member boolean)
RETURNS void LANGUAGE sql VOLATILE AS $$
    SELECT count(pg_notify('awa_control', json_build_object('freed', w.queue)::text))::int
    FROM (
        SELECT p_queue AS queue WHERE p_capped
        UNION
        SELECT m.queue FROM awa.fleet_pool_members AS m WHERE p_member
    ) AS w
$$;

-- claim_coordinated (0012) with the swap first. A claim of jobs the transaction did not
-- free, or of a queue the swap cannot serve, is answered exactly as 0012 answers it.
CREATE FUNCTION awa.claim_coordinated(
    p_queue text, p_limit integer, p_deadline_ms bigint, p_synchronous_commit text,
    p_instance text DEFAULT NULL, p_held integer DEFAULT NULL, p_freed integer DEFAULT 0,
    p_ordered boolean DEFAULT true
) RETURNS TABLE (
    id bigint, kind text, queue text, args jsonb, state awa.job_state, priority smallint,
    attempt integer, max_attempts integer, run_lease bigint, tags text[], metadata jsonb,
    progress jsonb, errors jsonb, created_at timestamptz, run_at timestamptz,
    attempted_at timestamptz, deadline_at timestamptz, finalized_at timestamptz,
    ordering_key text, blocked text, retry_in_ms double precision
) LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
    v_now     timestamptz := clock_timestamp();
    v_room    integer;
    v_limit   integer;
    v_lim     awa.queue_limits;
    v_member  boolean;
    v_running integer;
    v_swap    integer;
    v_swapped integer := 0;
    v_part    integer;  -- this process's part of the member's share, less what it holds
    v_counted boolean := false;  -- the swap's reads were made
BEGIN
    SELECT * INTO v_lim FROM awa.queue_limits AS l WHERE l.queue = p_queue;
    v_member := EXISTS (SELECT 1 FROM awa.fleet_pool_members AS m WHERE m.queue = p_queue);
    -- A paused queue (or a claim of nothing) is the locked claim's to answer: no rows.
    IF p_limit < 1 OR EXISTS (
        SELECT 1 FROM awa.queue_meta AS m WHERE m.queue = p_queue AND m.paused
    ) THEN
        PERFORM awa.announce_freed(p_queue, v_lim.concurrency IS NOT NULL, v_member)
        WHERE p_freed > 0;
        RETURN QUERY SELECT * FROM awa.claim_coordinated_locked(
            p_queue, p_limit, p_deadline_ms, p_synchronous_commit);
        RETURN;
    END IF;

    -- The swap: no more jobs than this transaction finished of the queue, cut to the cap
    -- (a count that sees those completions), the member's room and this process's part.
    -- The same reads then answer what the swap leaves, as the unlocked reads below would.
    -- Not while ordered jobs wait (``p_ordered``, awa.claim's probe; unknown counts as
    -- waiting): they start only through the locked claim's key locks.
    IF p_freed > 0 AND NOT p_ordered AND v_lim.partition_by IS NULL
       AND v_lim.rate_limit IS NULL
    THEN
        v_counted := true;
        v_swap := least(p_limit, p_freed);
        IF v_lim.concurrency IS NOT NULL OR v_member THEN
            SELECT count(*)::integer INTO v_running
            FROM awa.jobs AS r WHERE r.queue = p_queue AND r.state = 'running';
        END IF;
        IF v_lim.concurrency IS NOT NULL THEN
            v_swap := least(v_swap, v_lim.concurrency - v_running);
        END IF;
        IF v_member THEN
            v_room := coalesce(awa.pool_room(p_queue, v_now), 0);
            v_part := v_room;
            IF v_room > 0 AND p_instance IS NOT NULL THEN
                v_part := awa.pool_process_part(p_queue, p_instance, v_room + v_running)
                    - coalesce(p_held, 0);
            END IF;
            v_swap := least(v_swap, v_room, v_part);
            -- The demand signal the locked claim would have written.
            UPDATE awa.fleet_pool_members AS m SET asked_at = v_now
            WHERE m.queue = p_queue
              AND (m.asked_at IS NULL OR m.asked_at < v_now - interval '1 second');
        END IF;
        IF v_swap > 0 THEN
            -- The plain claim (awa.claim's), without the fleet's locks.
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
                LIMIT v_swap
                FOR UPDATE SKIP LOCKED
            ))
            RETURNING j.id, j.kind, j.queue, j.args, j.state, j.priority, j.attempt,
                j.max_attempts, j.run_lease, j.tags, nullif(j.metadata, '{}'::jsonb),
                j.progress, nullif(j.errors, '[]'::jsonb), j.created_at, j.run_at,
                j.attempted_at, j.deadline_at, j.finalized_at, j.ordering_key, NULL::text,
                NULL::float8;
            GET DIAGNOSTICS v_swapped = ROW_COUNT;
        END IF;
    END IF;
    -- Slots freed and not re-filled here are announced, so held-back claimers try them.
    PERFORM awa.announce_freed(p_queue, v_lim.concurrency IS NOT NULL, v_member)
    WHERE p_freed > v_swapped;
    IF v_swapped > 0 THEN
        -- All of it, or the queue ran dry (rows other claimers hold are theirs).
        IF v_swapped >= p_limit OR v_swapped < v_swap THEN
            RETURN;
        END IF;
        p_limit := p_limit - v_swapped;
        p_held := coalesce(p_held, 0) + v_swapped;
    END IF;
    IF v_counted THEN
        -- What is left, from the swap's reads: the cap reached, no room in the pool, this
        -- process at its part, or the room there is (claimed under the locks below).
        IF v_lim.concurrency IS NOT NULL AND v_running + v_swapped >= v_lim.concurrency THEN
            blocked := 'concurrency';
            RETURN NEXT;
            RETURN;
        END IF;
        IF v_member AND least(v_room, v_part) - v_swapped <= 0 THEN
            blocked := CASE WHEN v_room - v_swapped > 0 THEN 'pool_part' ELSE 'pool' END;
            RETURN NEXT;
            RETURN;
        END IF;
    END IF;

    -- A queue at its fleet-wide cap is told so without queueing for the queue's lock, as
    -- the pool is below: read without the lock, "full" can only be out of date by a
    -- completion committed since, whose own freed notice wakes the claimer again.
    IF v_lim.concurrency IS NOT NULL AND v_lim.partition_by IS NULL AND NOT v_counted AND (
        SELECT count(*) FROM awa.jobs AS r WHERE r.queue = p_queue AND r.state = 'running'
    ) >= v_lim.concurrency THEN
        blocked := 'concurrency';
        RETURN NEXT;
        RETURN;
    END IF;
    v_limit := p_limit;
    IF v_member AND v_counted THEN
        v_limit := least(p_limit, v_part - v_swapped);
    ELSIF v_member THEN
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
            blocked := CASE WHEN v_room > 0 THEN 'pool_part' ELSE 'pool' END;
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
            'pool_part'::text, NULL::float8
        WHERE (SELECT count(*) FROM k WHERE k.id IS NOT NULL) >= v_limit;
        RETURN;
    END IF;
    RETURN QUERY SELECT * FROM awa.claim_coordinated_locked(
        p_queue, p_limit, p_deadline_ms, p_synchronous_commit);
END
$$;


-- The one claim (0011), passing on what the transaction freed of the queue.
CREATE FUNCTION awa.claim(
    p_queue text, p_limit integer, p_deadline_ms bigint, p_synchronous_commit text,
    p_instance text DEFAULT NULL, p_held integer DEFAULT NULL, p_freed integer DEFAULT 0
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
        (SELECT o.id FROM awa.jobs AS o
         WHERE o.queue = p_queue AND o.state = 'available' AND o.partition_key IS NULL
           AND o.ordering_key IS NOT NULL
         ORDER BY o.priority, o.run_at, o.id LIMIT 1) IS NOT NULL
    INTO v_coordinated, v_paused, v_ordered
    FROM set_config('synchronous_commit', p_synchronous_commit, true);
    IF v_coordinated THEN
        RETURN QUERY SELECT * FROM awa.claim_coordinated(
            p_queue, p_limit, p_deadline_ms, p_synchronous_commit, p_instance, p_held,
            p_freed, v_ordered);
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

-- complete_and_claim (0011), telling each riding claim what its outcomes freed.
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
    c        record;
    v_ids    bigint[];
    v_queues text[];  -- the queue of each outcome applied, for the claims' p_freed
BEGIN
    PERFORM set_config('synchronous_commit', p_synchronous_commit, true);
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
    LOOP
        RETURN QUERY
        SELECT 'claimed'::text, c.queue, k.*
        FROM awa.claim(
            c.queue, c."limit", c.deadline_ms, p_synchronous_commit, c.instance, c.held,
            (SELECT count(*)::integer FROM unnest(v_queues) AS f(q) WHERE f.q = c.queue)) AS k;
    END LOOP;
END
$$;
