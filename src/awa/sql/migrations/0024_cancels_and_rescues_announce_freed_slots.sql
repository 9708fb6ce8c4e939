-- 0024: a job that leaves `running` by an operator's cancel or a leader's rescue frees a
-- slot of a capped queue (or of the fleet pool) as a completion does, and says so the
-- same way: a `freed` notice on awa_control wakes the claimers the fleet held back, which
-- otherwise waited for their next poll (session 25's review).
-- The queues among p_queues that are capped, plus every pool member when one of them is a
-- member; returns how many notices were sent.
CREATE OR REPLACE FUNCTION awa.announce_freed_in(p_queues text[])
RETURNS integer LANGUAGE sql VOLATILE AS $$
    SELECT count(pg_notify('awa_control', json_build_object('freed', w.queue)::text))::int
    FROM (
        SELECT l.queue FROM awa.queue_limits AS l
        WHERE l.concurrency IS NOT NULL AND l.queue = ANY (p_queues)
        UNION
        SELECT m.queue FROM awa.fleet_pool_members AS m
        WHERE EXISTS (SELECT 1 FROM awa.fleet_pool_members AS x WHERE x.queue = ANY (p_queues))
    ) AS w
$$;
