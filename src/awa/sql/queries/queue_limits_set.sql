-- queue_limits_set: whole-state write of one queue's fleet limits (CONTRACT §8, ADR 0010).
-- Runs right after queue_lock in the same transaction, so no claimer of the queue is
-- mid-claim while the limits, the rate buckets and the adopted partition keys change. A
-- changed partition_by (or a removed one) hands the queue's available jobs back to
-- adoption (partition_key NULL) and re-keys its running jobs by the new partition_by,
-- since a key's room is its cap less the running jobs that carry that key. Rate buckets
-- are clamped to the new burst and never refilled by a change; a new partition key or a
-- removed rate limit starts from no buckets at all. Wakes live workers on awa_control so
-- they switch claim paths at once.
WITH previous AS MATERIALIZED (
    SELECT l.partition_by, l.rate_limit FROM awa.queue_limits AS l
    WHERE l.queue = %(queue)s::text
), written AS (
    INSERT INTO awa.queue_limits (queue, concurrency, rate_limit, burst, partition_by, updated_at)
    VALUES (%(queue)s::text, %(concurrency)s::integer, %(rate_limit)s::float8,
        %(burst)s::integer, %(partition_by)s::text, now())
    ON CONFLICT (queue) DO UPDATE
    SET concurrency = EXCLUDED.concurrency, rate_limit = EXCLUDED.rate_limit,
        burst = EXCLUDED.burst, partition_by = EXCLUDED.partition_by, updated_at = now()
    RETURNING *
), rekeyed AS (
    UPDATE awa.jobs AS j
    SET partition_key = CASE WHEN j.state = 'running' AND %(partition_by)s::text IS NOT NULL
        THEN left(coalesce(j.args ->> %(partition_by)s::text, ''), 200) END
    WHERE j.queue = %(queue)s::text
      AND (j.state = 'running' OR (j.state = 'available' AND j.partition_key IS NOT NULL))
      AND %(partition_by)s::text IS DISTINCT FROM (SELECT partition_by FROM previous)
), dropped AS (
    DELETE FROM awa.queue_rate_buckets AS b
    WHERE b.queue = %(queue)s::text
      AND (%(rate_limit)s::float8 IS NULL
           OR %(partition_by)s::text IS DISTINCT FROM (SELECT partition_by FROM previous))
), clamped AS (
    UPDATE awa.queue_rate_buckets AS b
    SET tokens = least(b.tokens, coalesce(%(burst)s::integer, ceil(%(rate_limit)s::float8)))
    WHERE b.queue = %(queue)s::text AND %(rate_limit)s::float8 IS NOT NULL
      AND %(partition_by)s::text IS NOT DISTINCT FROM (SELECT partition_by FROM previous)
)
SELECT w.*, pg_notify('awa_control', json_build_object('queue_meta', w.queue)::text) AS notified
FROM written AS w
