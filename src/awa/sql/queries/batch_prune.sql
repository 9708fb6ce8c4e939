-- batch_prune: retention of ended batch operations (completed or cancelled), a batch at a
-- time (the leader's pruner loops until done). An ended operation keeps only its counts
-- (its items went when it ended), kept as long as failed jobs are.
-- Fenced: does nothing unless the given epoch is still the leader lease's (ADR 0019).
DELETE FROM awa.batch_operations
WHERE id = ANY (ARRAY(
    SELECT id FROM awa.batch_operations
    WHERE state IN ('completed', 'cancelled')
      AND finalized_at < now() - %(retention_ms)s::bigint * interval '1 millisecond'
      AND (SELECT awa.leader_holds(%(epoch)s::bigint))
    LIMIT %(limit)s
))
