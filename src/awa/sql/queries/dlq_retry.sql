-- dlq_retry: move dead-lettered jobs back to awa.jobs as available now, with a fresh
-- attempt budget (attempt 0) and their original priority, in one statement: a job is in
-- exactly one of the two tables at any time. The id, run_lease (leases only grow, so no
-- old attempt can match), errors (history), progress (checkpoint) and ordering key (its
-- place in line: the same id) are kept. An entry whose unique key a job in awa.jobs now
-- holds (inserted after this one left its guarded states) stays in the DLQ: retrying it
-- would duplicate that job, and one such entry must not hold back the rest (ON CONFLICT
-- DO NOTHING; only what was inserted leaves the DLQ). A concurrent retry of the same
-- entry meets the same id and skips it too. dlq_held_back names what stayed. Each queue is
-- woken (notices are de-duplicated per transaction). The caller refuses an empty filter
-- unless allow_all.
WITH picked AS (
    SELECT * FROM awa.dlq
    WHERE (%(ids)s::bigint[] IS NULL OR id = ANY(%(ids)s::bigint[]))
  AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(older_than_ms)s::bigint IS NULL
       OR dlq_at < now() - %(older_than_ms)s::bigint * interval '1 millisecond')
), inserted AS (
INSERT INTO awa.jobs (
    id, kind, queue, args, state, priority, original_priority, attempt, max_attempts,
    run_lease, tags, metadata, progress, errors, created_at, run_at, unique_key,
    unique_states, ordering_key
)
SELECT id, kind, queue, args, 'available', original_priority, original_priority, 0,
    max_attempts, run_lease, tags, metadata, progress, errors, created_at, now(), unique_key,
    unique_states, ordering_key
FROM picked
ORDER BY id
ON CONFLICT DO NOTHING
RETURNING *
), removed AS (
    DELETE FROM awa.dlq WHERE id IN (SELECT id FROM inserted)
)
SELECT i.*, pg_notify('awa_available', i.queue) AS notified FROM inserted AS i
