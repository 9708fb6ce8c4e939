-- dlq_depth: how many jobs each queue has in the dead letter queue (one queue, or all).
-- Expects dlq_queue_idx (an index-only count per queue once the table is vacuumed).
SELECT queue, count(*) AS depth
FROM awa.dlq
WHERE %(queue)s::text IS NULL OR queue = %(queue)s::text
GROUP BY queue
ORDER BY queue
