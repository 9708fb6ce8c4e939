-- 0040: what a weighted process can take now of a pool member counts its overflow.
-- Forward-only: never edit a shipped migration; add the next number instead.
--
-- 0039 counted a weighted process's free permits as global_max_workers less what all its
-- queues run. That includes the minimums of its other queues, which the member can never
-- use: with another queue's minimum of 4 idle and the overflow held by a queue outside
-- the pool, the process still held back 4 of the member's share it could not run, and a
-- pool of 8 ran 4 again (a review). What a weighted process can take now of the member is
-- computed as its permits are handed out (design record 011, awa.explain's permits_for):
-- the member's own minimum, the overflow it uses, and the overflow nobody uses — and never
-- more than the process's global permits nobody holds allow.
CREATE OR REPLACE FUNCTION awa.pool_process_part(p_queue text, p_instance text, p_share integer)
RETURNS integer LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_caps   integer[];  -- what each other process can run of the queue now (NULL: no bound)
    v_fair   integer;
    v_others bigint;
BEGIN
    SELECT coalesce(array_agg(coalesce(
            (q.s #>> '{capacity,max_workers}')::integer,
            CASE WHEN w.global_max IS NULL OR NOT q.s ? 'in_flight'
                THEN (q.s #>> '{capacity,ceiling}')::integer  -- an older snapshot
                ELSE least((q.s #>> '{capacity,ceiling}')::integer,
                    (q.s #>> '{capacity,min_workers}')::integer + greatest(
                        (q.s #>> '{capacity,overflow_held}')::integer,
                        (q.s ->> 'in_flight')::integer
                            - (q.s #>> '{capacity,min_workers}')::integer)
                        + greatest(0, w.global_max - w.minimums - w.overflow_used),
                    (q.s ->> 'in_flight')::integer + greatest(0, w.global_max - w.in_flight))
            END)),
        '{}')
    INTO v_caps
    FROM awa.runtime_instances AS i
    CROSS JOIN LATERAL (SELECT i.snapshot -> 'queues' -> p_queue AS s) AS q
    CROSS JOIN LATERAL (
        SELECT (i.snapshot ->> 'global_max_workers')::integer AS global_max,
            sum((e.v ->> 'in_flight')::integer) AS in_flight,
            sum((e.v #>> '{capacity,min_workers}')::integer)
                FILTER (WHERE e.v #>> '{capacity,mode}' = 'weighted') AS minimums,
            sum(greatest((e.v #>> '{capacity,overflow_held}')::integer,
                    (e.v ->> 'in_flight')::integer - (e.v #>> '{capacity,min_workers}')::integer))
                FILTER (WHERE e.v #>> '{capacity,mode}' = 'weighted') AS overflow_used
        FROM jsonb_each(i.snapshot -> 'queues') AS e(k, v)
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
