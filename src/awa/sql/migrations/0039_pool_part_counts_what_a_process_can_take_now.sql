-- 0039: a fleet pool member's part per process counts what a weighted process can take now.
-- Forward-only: never edit a shipped migration; add the next number instead.
--
-- awa.pool_process_part (0011, 0018) held back, for each other process serving the
-- member, an even part capped by that process's capacity for the queue: max_workers, or a
-- weighted process's ceiling (its minimum plus the whole overflow pool), whether or not
-- that process could run the member's jobs now. A weighted process whose
-- global_max_workers were all taken by another queue kept a full part it could not use,
-- and the hard-reserved process beside it was held at its own: a pool of 8 ran 4 with 280
-- jobs waiting, for as long as the other queue kept those permits (a review, with real
-- processes).
--
-- A weighted process now holds back at most what it can take of the member now, counted
-- as its permits are handed out (design record 011; awa.explain's permits_for counts the
-- same): the member's minimum, the overflow the member uses and the overflow nobody uses,
-- and never more than the process's global permits nobody holds. A hard-reserved process's
-- permits are the queue's own, so its max_workers counts whole; a snapshot without these
-- numbers counts by capacity, as before. Two first forms failed: each process's
-- `available` permits (a claim under way had reserved them, so a process showed none and
-- the other took the whole share: tests/fleet/test_fleet_pool.py, 2 runs in 3), and
-- global_max_workers less what its queues run (another queue's idle minimum counted as the
-- member's: 4 of 8 again, a second review).
CREATE OR REPLACE FUNCTION awa.pool_process_part(p_queue text, p_instance text, p_share integer)
RETURNS integer LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_caps   integer[];  -- what each other process can run of the queue now (NULL: no bound)
    v_fair   integer;
    v_others bigint;
BEGIN
    SELECT coalesce(array_agg(coalesce(
            (i.snapshot #>> ARRAY['queues', p_queue, 'capacity', 'max_workers'])::integer,
            CASE WHEN w.global_max IS NULL OR w.member_in_flight IS NULL
                THEN w.member_ceiling  -- an older snapshot
                ELSE least(w.member_ceiling,
                    w.member_held + greatest(0, w.global_max - w.minimums - w.overflow_used),
                    w.member_in_flight + greatest(0, w.global_max - w.in_flight))
            END)),
        '{}')
    INTO v_caps
    FROM awa.runtime_instances AS i
    CROSS JOIN LATERAL (
        SELECT (i.snapshot ->> 'global_max_workers')::integer AS global_max,
            sum(u.in_flight) AS in_flight,
            sum(u.min_workers) FILTER (WHERE u.weighted) AS minimums,
            sum(u.overflow) FILTER (WHERE u.weighted) AS overflow_used,
            max(u.in_flight) FILTER (WHERE e.k = p_queue) AS member_in_flight,
            max(u.min_workers + u.overflow) FILTER (WHERE e.k = p_queue) AS member_held,
            max((e.v #>> '{capacity,ceiling}')::integer) FILTER (WHERE e.k = p_queue)
                AS member_ceiling
        FROM jsonb_each(i.snapshot -> 'queues') AS e(k, v)
        CROSS JOIN LATERAL (
            SELECT (e.v ->> 'in_flight')::integer AS in_flight,
                (e.v #>> '{capacity,min_workers}')::integer AS min_workers,
                -- the overflow a queue uses: what it holds, or more when its minimum was
                -- lowered under what it runs
                greatest((e.v #>> '{capacity,overflow_held}')::integer,
                    (e.v ->> 'in_flight')::integer
                        - (e.v #>> '{capacity,min_workers}')::integer) AS overflow,
                e.v #>> '{capacity,mode}' = 'weighted' AS weighted
        ) AS u
    ) AS w
    WHERE i.last_seen_at > now() - interval '30 seconds'
      AND i.instance_id::text <> p_instance
      AND i.snapshot -> 'queues' ? p_queue;
    v_fair := ceil(p_share::numeric / (cardinality(v_caps) + 1));
    SELECT coalesce(sum(least(v_fair, coalesce(c.cap, v_fair))), 0) INTO v_others
    FROM unnest(v_caps) AS c(cap);
    RETURN greatest(v_fair, p_share - v_others);
END
$$;
