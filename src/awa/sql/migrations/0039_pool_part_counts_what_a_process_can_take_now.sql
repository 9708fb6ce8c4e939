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
-- processes). A weighted process now holds back at most what it runs of the member plus
-- its global permits nobody holds (global_max_workers less what all its queues run, from
-- its snapshot); a hard-reserved process's permits are the queue's own, so its
-- max_workers still counts whole. A snapshot without those numbers counts by capacity, as
-- before. (A first form read each process's `available` permits: a process whose permits
-- a claim under way had reserved showed none, and the other took the member's whole
-- share: tests/fleet/test_fleet_pool.py, 2 runs in 3.)
CREATE OR REPLACE FUNCTION awa.pool_process_part(p_queue text, p_instance text, p_share integer)
RETURNS integer LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_caps   integer[];  -- what each other process can run of the queue now (NULL: no bound)
    v_fair   integer;
    v_others bigint;
BEGIN
    SELECT coalesce(array_agg(coalesce(
            (q.s #>> '{capacity,max_workers}')::integer,
            least(  -- least() skips a NULL: an older snapshot counts by its ceiling alone
                (q.s #>> '{capacity,ceiling}')::integer,
                (q.s ->> 'in_flight')::integer + greatest(0,
                    (i.snapshot ->> 'global_max_workers')::integer - (
                        SELECT sum((e.v ->> 'in_flight')::integer)
                        FROM jsonb_each(i.snapshot -> 'queues') AS e(k, v)))))),
        '{}')
    INTO v_caps
    FROM awa.runtime_instances AS i
    CROSS JOIN LATERAL (SELECT i.snapshot -> 'queues' -> p_queue AS s) AS q
    WHERE i.last_seen_at > now() - interval '30 seconds'
      AND i.instance_id::text <> p_instance
      AND i.snapshot -> 'queues' ? p_queue;
    v_fair := ceil(p_share::numeric / (cardinality(v_caps) + 1));
    SELECT coalesce(sum(least(v_fair, coalesce(c.cap, v_fair))), 0) INTO v_others
    FROM unnest(v_caps) AS c(cap);
    RETURN greatest(v_fair, p_share - v_others);
END
$$;
