-- dlq_prune: retention of the dead letter queue, a batch at a time (the leader's pruner
-- loops until done). Expects dlq_at_idx.
DELETE FROM awa.dlq
WHERE id IN (
    SELECT id FROM awa.dlq
    WHERE dlq_at < now() - %(retention_ms)s::bigint * interval '1 millisecond'
    LIMIT %(limit)s
)
