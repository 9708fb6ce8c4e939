-- job_prune_finalized: delete a batch of finished jobs older than their retention.
-- Batched so a large backlog never holds long locks; the leader loops until done.
-- One branch per retention, each a range scan of its own partial index in finalized_at
-- order (jobs_prune_completed_idx, jobs_prune_failed_idx, migration 0041) that stops at
-- the batch: with one condition over both states, failed jobs younger than their
-- retention but older than the completed one made the planner scan the whole table
-- every minute (a review). The second branch runs only when the first leaves room.
-- The outer condition says again what may go: a row retried (or otherwise moved on) after
-- the ids were read is re-checked as it is locked, and kept (a review: an operator's retry
-- committed during the batch, and the pruner deleted the now available job).
-- Fenced: does nothing unless the given epoch is still the leader lease's (ADR 0019).
-- The ids as an array (not `id IN (subquery)`): estimated at the full batch, the IN form
-- was planned as a hash semi-join scanning the whole table once per batch (93–131 ms a
-- batch beside 650 000 rows, against 9 ms by the primary key).
DELETE FROM awa.jobs AS d
WHERE (d.state = 'completed'
       AND d.finalized_at < now() - %(completed_retention_ms)s::bigint * interval '1 millisecond'
    OR d.state IN ('failed', 'cancelled')
       AND d.finalized_at < now() - %(failed_retention_ms)s::bigint * interval '1 millisecond')
  AND d.id = ANY (ARRAY(
    SELECT due.id FROM (
        (SELECT c.id FROM awa.jobs AS c
         WHERE c.state = 'completed'
           AND c.finalized_at < now() - %(completed_retention_ms)s::bigint * interval '1 millisecond'
           AND (SELECT awa.leader_holds(%(epoch)s::bigint))
         ORDER BY c.finalized_at
         LIMIT %(limit)s)
        UNION ALL
        (SELECT f.id FROM awa.jobs AS f
         WHERE f.state IN ('failed', 'cancelled')
           AND f.finalized_at < now() - %(failed_retention_ms)s::bigint * interval '1 millisecond'
           AND (SELECT awa.leader_holds(%(epoch)s::bigint))
         ORDER BY f.finalized_at
         LIMIT %(limit)s)
    ) AS due
    LIMIT %(limit)s
))
