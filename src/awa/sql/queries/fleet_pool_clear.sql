-- fleet_pool_clear: remove the fleet pool and its members, after pool_lock (same
-- transaction). Returns how many queues were members; wakes their live workers.
WITH members AS (
    DELETE FROM awa.fleet_pool_members RETURNING queue
), pool AS (
    DELETE FROM awa.fleet_pool RETURNING total
), woken AS (
    SELECT pg_notify('awa_control', json_build_object('queue_meta', m.queue)::text)
    FROM members AS m
)
SELECT (SELECT count(*) FROM members) AS members, (SELECT count(*) FROM pool) AS pools,
    (SELECT count(*) FROM woken) AS notified
