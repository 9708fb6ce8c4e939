-- job_prune_finalized: delete a batch of finished jobs older than their retention.
-- Batched so a large backlog never holds long locks; the leader loops until done.
-- Expects jobs_finalized_idx (finalized_at) WHERE finalized_at IS NOT NULL.
-- Fenced: does nothing unless the given epoch is still the leader lease's (ADR 0019).
-- The ids as an array (not `id IN (subquery)`): estimated at the full batch, the IN form
-- was planned as a hash semi-join scanning the whole table once per batch (93–131 ms a
-- batch beside 650 000 rows, against 9 ms by the primary key).
DELETE FROM awa.jobs
WHERE id = ANY (ARRAY(
    SELECT id FROM awa.jobs
    WHERE finalized_at IS NOT NULL AND (SELECT awa.leader_holds(%(epoch)s::bigint))
      AND ((state = 'completed'
            AND finalized_at < now() - %(completed_retention_ms)s::bigint * interval '1 millisecond')
        OR (state IN ('failed', 'cancelled')
            AND finalized_at < now() - %(failed_retention_ms)s::bigint * interval '1 millisecond'))
    LIMIT %(limit)s
))
