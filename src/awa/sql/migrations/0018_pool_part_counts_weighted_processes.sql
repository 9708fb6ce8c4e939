-- 0018: a fleet pool member's part per process counts what a weighted process can run.
-- Forward-only: never edit a shipped migration; add the next number instead.
--
-- awa.pool_process_part (0011) splits a member's share evenly over the processes serving
-- it, and gives a process what the others lack the workers to take, reading each other
-- process's capacity from its runtime snapshot. It read only `max_workers`, which a
-- weighted-mode process does not publish: such a process counted as able to take a full
-- even part, and the others were cut to theirs. With a pool of 10, a hard-reserved
-- process of 20 permits and a weighted one of at most 3, the fleet ran 8, not 10.
-- Weighted snapshots now carry `ceiling` (min_workers plus the whole overflow pool), read
-- where max_workers is absent; a snapshot with neither counts as uncapped, as before.
CREATE OR REPLACE FUNCTION awa.pool_process_part(p_queue text, p_instance text, p_share integer)
RETURNS integer LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_caps   integer[];  -- each other process's most running jobs of the queue (NULL: none)
    v_fair   integer;
    v_others bigint;
BEGIN
    SELECT coalesce(array_agg(coalesce(
            (i.snapshot #>> ARRAY['queues', p_queue, 'capacity', 'max_workers'])::integer,
            (i.snapshot #>> ARRAY['queues', p_queue, 'capacity', 'ceiling'])::integer)),
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
