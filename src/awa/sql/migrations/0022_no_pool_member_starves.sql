-- 0022: a fleet-pool member with waiting jobs gets a slot of the shared rest whenever the
-- rest has one for each such member (CONTRACT §9, design record 011: weighted fair share
-- prevents starvation). Forward-only: never edit a shipped migration; add the next number.
--
-- 0009 split the rest by largest remainder (ADR 0035): each member within one slot of its
-- ideal, but a member whose ideal was under one slot could get none for as long as
-- heavier members had work (pool of 2, weights 1 and 4: 0 and 2; found in session 24's
-- review). Now, when the rest has at least one slot per asking member, each gets one
-- first and the remainder is split as before: still within one slot of the ideal when
-- every ideal is at least one slot, and never zero for a member with work. A rest smaller
-- than the number of asking members is split as before (somebody must wait).
-- The function is pool_room as 0013 left it, but for that split.
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
    v_first           integer;
    v_rest            bigint;
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
    -- One slot for each asking member first, when the overflow has one for each (no
    -- member with waiting jobs is starved by heavier ones, as design record 011 has it);
    -- the rest split by weight, rounded down, the slots left over going one each to the
    -- largest remainders (ties by queue name, byte order: as FleetPool.busy_shares has it).
    v_first := CASE WHEN v_overflow >= cardinality(v_queues) THEN 1 ELSE 0 END;
    v_rest := v_overflow - v_first * cardinality(v_queues);
    WITH parts AS (
        SELECT a.q, floor(a.exact) AS part, a.exact - floor(a.exact) AS rest
        FROM unnest(v_queues, v_weights) AS w(q, weight),
            LATERAL (SELECT w.q, v_rest::numeric * w.weight / v_asking_weight AS exact) AS a
    ), ranked AS (
        SELECT p.q, p.part, row_number() OVER (ORDER BY p.rest DESC, p.q COLLATE "C") AS place
        FROM parts AS p
    )
    SELECT v_first + r.part + (r.place <= v_rest - (SELECT sum(p.part) FROM parts AS p))::integer
    INTO v_me_part
    FROM ranked AS r WHERE r.q = p_queue;
    RETURN least(
        v_total - v_others_reserved - v_me_running,
        v_me_min + v_me_part - v_me_running);
END
$$;
