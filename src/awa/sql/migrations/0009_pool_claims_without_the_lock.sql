-- 0009: a pool member's claim with no room returns without queueing for the pool's lock;
-- the completion statement finds its jobs by primary key; pool_room in PL/pgSQL, its
-- overflow split by largest remainder (ADR 0035).
-- Forward-only: never edit a shipped migration; add the next number instead.
--
-- Every completion of a fleet-pool member sends a ``freed`` notice for every member, and
-- the dispatchers held back by the pool wake and claim. Most find the slots already
-- re-filled by the claim that rode on that very completion (ADR 0012), yet each waited in
-- line for the pool's lock to learn it, and the riding completions waited behind them:
-- measured with two processes sharing a pool of 24 (bench/fleet_fairness.py), 2 652
-- stand-alone claims against 741 completions, jobs ``running`` for ~22 ms per 10 ms
-- handler. Now such a claim first reads the room without the lock and, with none, says
-- so at once; only a claim that may start something takes the lock (and reads again).
-- The unlocked read can only err towards "no room" by counting a completion not yet
-- committed, whose own notice wakes the claimer again once it is.

-- complete_and_claim (0008) but for how it finds the jobs of the outcomes.
CREATE OR REPLACE FUNCTION awa.complete_and_claim(
    p_outcomes jsonb, p_synchronous_commit text, p_claims jsonb
) RETURNS TABLE (
    row_type text, claim_queue text,
    id bigint, kind text, queue text, args jsonb, state awa.job_state, priority smallint,
    attempt integer, max_attempts integer, run_lease bigint, tags text[], metadata jsonb,
    progress jsonb, errors jsonb, created_at timestamptz, run_at timestamptz,
    attempted_at timestamptz, deadline_at timestamptz, finalized_at timestamptz,
    ordering_key text, blocked text, retry_in_ms double precision
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
        SELECT r.queue, r."limit", r.deadline_ms
        FROM jsonb_to_recordset(p_claims) AS r(queue text, "limit" integer, deadline_ms bigint)
    LOOP
        RETURN QUERY
        SELECT 'claimed'::text, c.queue, k.*
        FROM awa.claim(c.queue, c."limit", c.deadline_ms, p_synchronous_commit) AS k;
    END LOOP;
END
$$;

-- claim_coordinated (0008) keeps its body under a new name; in its place, a wrapper that
-- answers a pool member with no room without taking the pool's lock. awa.claim calls
-- claim_coordinated by name, so every claim (stand-alone or riding) goes through it.
ALTER FUNCTION awa.claim_coordinated(text, integer, bigint, text)
    RENAME TO claim_coordinated_locked;

CREATE FUNCTION awa.claim_coordinated(
    p_queue text, p_limit integer, p_deadline_ms bigint, p_synchronous_commit text
) RETURNS TABLE (
    id bigint, kind text, queue text, args jsonb, state awa.job_state, priority smallint,
    attempt integer, max_attempts integer, run_lease bigint, tags text[], metadata jsonb,
    progress jsonb, errors jsonb, created_at timestamptz, run_at timestamptz,
    attempted_at timestamptz, deadline_at timestamptz, finalized_at timestamptz,
    ordering_key text, blocked text, retry_in_ms double precision
) LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := clock_timestamp();
BEGIN
    IF p_limit >= 1
       AND EXISTS (SELECT 1 FROM awa.fleet_pool_members AS m WHERE m.queue = p_queue)
       AND NOT EXISTS (SELECT 1 FROM awa.queue_meta AS m WHERE m.queue = p_queue AND m.paused)
       AND awa.pool_room(p_queue, v_now) <= 0
    THEN
        -- The demand signal, as the locked claim writes it: others' shares shrink for it.
        UPDATE awa.fleet_pool_members AS m SET asked_at = v_now
        WHERE m.queue = p_queue
          AND (m.asked_at IS NULL OR m.asked_at < v_now - interval '1 second');
        blocked := 'pool';
        RETURN NEXT;
        RETURN;
    END IF;
    RETURN QUERY SELECT * FROM awa.claim_coordinated_locked(
        p_queue, p_limit, p_deadline_ms, p_synchronous_commit);
END
$$;


-- pool_room (0008) in PL/pgSQL. As a SQL function it was planned afresh on every call
-- from claim_coordinated, and the planner, trusting a guess of 530 members for a table
-- never analysed, turned each "has available jobs" test into a hashed scan of every
-- available job of the queue: 1.5 ms per claim under the pool's lock, measured mid-drain.
-- Here each statement's plan is cached and probes its index per member.
--
-- One change of answer: the overflow is split by largest remainder. 0008 rounded every
-- member's weighted part up, so the parts summed to more than the pool and whoever
-- claimed first kept the extra slot (weights 3:1:2 over 20 slots: the weight-1 member
-- held 4 of its 3.33 and the weight-2 member 10 of its 10.67). Now the parts are rounded
-- down and the slots left over go to the largest remainders (ties by queue name), so
-- they sum to the overflow exactly and each is within one slot of its ideal.
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
            EXISTS (SELECT 1 FROM awa.jobs AS a WHERE a.queue = m.queue
                    AND a.state = 'available' AND a.partition_key IS NULL
                    AND a.ordering_key IS NULL)
            OR EXISTS (SELECT 1 FROM awa.jobs AS a WHERE a.queue = m.queue
                    AND a.state = 'available' AND a.partition_key IS NOT NULL)
            OR EXISTS (SELECT 1 FROM awa.jobs AS a WHERE a.queue = m.queue
                    AND a.state = 'available' AND a.partition_key IS NULL
                    AND a.ordering_key IS NOT NULL)))
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
