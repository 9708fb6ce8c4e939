-- queue_meta_set_dlq: record at worker start which queues dead-letter their failed jobs
-- (QueueConfig.dlq). The DLQ trigger reads this flag when a job fails. A queue without a
-- control row gets one only when it turns the DLQ on; rows change only when the flag does,
-- and a row that turning it off leaves holding nothing (not paused, no override) is
-- deleted, so a queue served once with the DLQ is not listed for ever.
WITH wanted AS (
    SELECT c.queue, c.dlq
    FROM unnest(%(queues)s::text[], %(dlq)s::boolean[]) AS c(queue, dlq)
), forgotten AS (
    DELETE FROM awa.queue_meta AS m
    USING wanted AS c
    WHERE m.queue = c.queue AND NOT c.dlq AND m.dlq AND NOT m.paused
      AND num_nonnulls(m.override_poll_interval_ms, m.override_claim_batch_size,
          m.override_rate_limit, m.override_deadline_ms, m.override_max_workers,
          m.override_min_workers, m.override_weight) = 0
    RETURNING m.queue
)
INSERT INTO awa.queue_meta (queue, dlq)
SELECT c.queue, c.dlq
FROM wanted AS c
WHERE (c.dlq OR EXISTS (SELECT 1 FROM awa.queue_meta AS m WHERE m.queue = c.queue))
  AND NOT EXISTS (SELECT 1 FROM forgotten AS f WHERE f.queue = c.queue)
ON CONFLICT (queue) DO UPDATE SET dlq = EXCLUDED.dlq
WHERE awa.queue_meta.dlq IS DISTINCT FROM EXCLUDED.dlq
