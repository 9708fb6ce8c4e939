-- fleet_pool_set: whole-state write of the fleet pool (CONTRACT §9): the total and the
-- member list are replaced together. After pool_lock (same transaction), so no member is
-- mid-claim while membership changes. Members' demand signals (asked_at) survive for
-- queues that stay members. Wakes live workers of every queue that joined, stayed or left.
WITH pool AS (
    INSERT INTO awa.fleet_pool (singleton, total, updated_at)
    VALUES (true, %(total)s::integer, now())
    ON CONFLICT (singleton) DO UPDATE SET total = EXCLUDED.total, updated_at = now()
    RETURNING total, updated_at
), wanted AS (
    SELECT m.queue, m.min_workers, m.weight
    FROM unnest(%(queues)s::text[], %(min_workers)s::integer[], %(weights)s::integer[])
        AS m(queue, min_workers, weight)
), left_pool AS (
    DELETE FROM awa.fleet_pool_members AS m
    WHERE NOT EXISTS (SELECT 1 FROM wanted AS w WHERE w.queue = m.queue)
    RETURNING m.queue
), members AS (
    INSERT INTO awa.fleet_pool_members AS m (queue, min_workers, weight)
    SELECT w.queue, w.min_workers, w.weight FROM wanted AS w
    ON CONFLICT (queue) DO UPDATE
    SET min_workers = EXCLUDED.min_workers, weight = EXCLUDED.weight
    RETURNING m.queue
), woken AS (
    SELECT pg_notify('awa_control', json_build_object('queue_meta', q.queue)::text)
    FROM (SELECT queue FROM members UNION SELECT queue FROM left_pool) AS q
)
SELECT p.total, p.updated_at, (SELECT count(*) FROM woken) AS notified FROM pool AS p
