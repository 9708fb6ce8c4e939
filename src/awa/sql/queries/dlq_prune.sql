-- dlq_prune: retention of the dead letter queue, a batch at a time (the leader's pruner
-- loops until done). Expects dlq_at_idx.
-- Fenced: does nothing unless the given epoch is still the leader lease's (ADR 0019).
-- The ids as an array, as in job_prune_finalized (a hash semi-join would scan the table).
DELETE FROM awa.dlq
WHERE id = ANY (ARRAY(
    SELECT id FROM awa.dlq
    WHERE dlq_at < now() - %(retention_ms)s::bigint * interval '1 millisecond'
      AND (SELECT awa.leader_holds(%(epoch)s::bigint))
    LIMIT %(limit)s
))
