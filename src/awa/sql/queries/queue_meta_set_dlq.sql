-- queue_meta_set_dlq: record at worker start which queues dead-letter their failed jobs
-- (QueueConfig.dlq). The DLQ trigger reads this flag when a job fails. A queue without a
-- control row gets one only when it turns the DLQ on; rows change only when the flag does.
INSERT INTO awa.queue_meta (queue, dlq)
SELECT c.queue, c.dlq
FROM unnest(%(queues)s::text[], %(dlq)s::boolean[]) AS c(queue, dlq)
WHERE c.dlq OR EXISTS (SELECT 1 FROM awa.queue_meta AS m WHERE m.queue = c.queue)
ON CONFLICT (queue) DO UPDATE SET dlq = EXCLUDED.dlq
WHERE awa.queue_meta.dlq IS DISTINCT FROM EXCLUDED.dlq
