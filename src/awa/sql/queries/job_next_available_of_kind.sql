-- job_next_available_of_kind: the id of the next available job of one kind in one queue,
-- in claim order (awa.testing.work_one(client, ArgsType): tests run one job of the type
-- they are about, whatever else waits in the queue). The caller claims it by id with
-- job_claim_one; never used by workers. An ordered job counts only at its key's turn
-- (ADR 0034); a paused queue has none, as for a worker. Test-sized tables: no index is
-- relied on.
SELECT id FROM awa.jobs
WHERE state = 'available' AND queue = %(queue)s AND kind = %(kind)s
  AND (ordering_key IS NULL OR awa.ordering_ready(ordering_key, id))
  AND NOT EXISTS (SELECT 1 FROM awa.queue_meta AS m WHERE m.queue = %(queue)s AND m.paused)
ORDER BY priority, run_at, id
LIMIT 1
