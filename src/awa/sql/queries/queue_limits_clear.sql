-- queue_limits_clear: remove one queue's fleet limits. After queue_lock, like
-- queue_limits_set: adopted jobs go back to the plain claim index and the rate buckets go.
-- Returns the removed row (none when the queue had no limits) and wakes live workers.
WITH removed AS (
    DELETE FROM awa.queue_limits AS l
    WHERE l.queue = %(queue)s::text
    RETURNING l.*
), rekeyed AS (
    UPDATE awa.jobs AS j SET partition_key = NULL
    WHERE j.queue = %(queue)s::text AND j.state = 'available' AND j.partition_key IS NOT NULL
), dropped AS (
    DELETE FROM awa.queue_rate_buckets AS b WHERE b.queue = %(queue)s::text
)
SELECT r.*, pg_notify('awa_control', json_build_object('queue_meta', r.queue)::text) AS notified
FROM removed AS r
