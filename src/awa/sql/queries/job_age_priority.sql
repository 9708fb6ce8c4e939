-- job_age_priority: priority aging. An available job gains one priority level (a lower
-- number) per interval it has waited since run_at (or since an operator last set its
-- priority, aging_from: migration 0033), never above 1:
--   priority = greatest(1, original_priority - floor(waited / interval)).
-- One statement per tick for every queue with aging on (interval > 0), in batches that
-- skip rows a dispatcher is claiming. Aging only raises a job; the promoter resets
-- priority to original_priority when a retried or snoozed job becomes available again, so
-- aging always counts from the current wait. Claims keep using jobs_claim_idx
-- (queue, priority, run_at, id): the update moves the row within that index, and the
-- candidate scan walks the same index for priority > 1; jobs adopted by a partitioned
-- queue are aged the same way on jobs_partition_idx (ADR 0010), and ordered ones on
-- jobs_ordered_idx (ADR 0034: priority orders the keys' turns, never a key's own jobs).
-- Fenced: does nothing unless the given epoch is still the leader lease's (ADR 0019).
WITH config AS (
    SELECT c.queue, c.interval_ms
    FROM unnest(%(queues)s::text[], %(intervals_ms)s::bigint[]) AS c(queue, interval_ms)
    WHERE c.interval_ms > 0 AND (SELECT awa.leader_holds(%(epoch)s::bigint))
), aged_plain AS (
    SELECT j.id,
        greatest(1, j.original_priority - floor(
            extract(epoch FROM now() - greatest(j.run_at, j.aging_from)) * 1000 / c.interval_ms))::smallint AS priority
    FROM config AS c
    JOIN awa.jobs AS j ON j.queue = c.queue
    WHERE j.state = 'available' AND j.partition_key IS NULL AND j.ordering_key IS NULL
      AND j.priority > 1
      AND j.run_at <= now() - c.interval_ms * interval '1 millisecond'
      AND greatest(1, j.original_priority - floor(
            extract(epoch FROM now() - greatest(j.run_at, j.aging_from)) * 1000 / c.interval_ms)) < j.priority
    LIMIT %(limit)s
    FOR UPDATE OF j SKIP LOCKED
), aged_keyed AS (
    SELECT j.id,
        greatest(1, j.original_priority - floor(
            extract(epoch FROM now() - greatest(j.run_at, j.aging_from)) * 1000 / c.interval_ms))::smallint AS priority
    FROM config AS c
    JOIN awa.jobs AS j ON j.queue = c.queue
    WHERE j.state = 'available' AND j.partition_key IS NOT NULL AND j.priority > 1
      AND j.run_at <= now() - c.interval_ms * interval '1 millisecond'
      AND greatest(1, j.original_priority - floor(
            extract(epoch FROM now() - greatest(j.run_at, j.aging_from)) * 1000 / c.interval_ms)) < j.priority
    LIMIT %(limit)s
    FOR UPDATE OF j SKIP LOCKED
), aged_ordered AS (
    SELECT j.id,
        greatest(1, j.original_priority - floor(
            extract(epoch FROM now() - greatest(j.run_at, j.aging_from)) * 1000 / c.interval_ms))::smallint AS priority
    FROM config AS c
    JOIN awa.jobs AS j ON j.queue = c.queue
    WHERE j.state = 'available' AND j.partition_key IS NULL AND j.ordering_key IS NOT NULL
      AND j.priority > 1
      AND j.run_at <= now() - c.interval_ms * interval '1 millisecond'
      AND greatest(1, j.original_priority - floor(
            extract(epoch FROM now() - greatest(j.run_at, j.aging_from)) * 1000 / c.interval_ms)) < j.priority
    LIMIT %(limit)s
    FOR UPDATE OF j SKIP LOCKED
), aged AS (
    SELECT * FROM aged_plain UNION ALL SELECT * FROM aged_keyed
    UNION ALL SELECT * FROM aged_ordered
)
UPDATE awa.jobs AS j
SET priority = aged.priority
FROM aged
WHERE j.id = aged.id AND j.state = 'available'
RETURNING j.id
