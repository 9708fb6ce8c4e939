-- dlq_retry: move dead-lettered jobs back to awa.jobs as available now, with a fresh
-- attempt budget (attempt 0) and their original priority, in one statement: a job is in
-- exactly one of the two tables at any time. The id, run_lease (leases only grow, so no
-- old attempt can match), errors (history), progress (checkpoint) and ordering key (its
-- place in line: the same id) are kept.
-- The entries are deleted first, which locks them: a concurrent retry or purge of the
-- same entry waits, then finds it gone (a read first, without the lock, let two retries
-- or a retry and a purge both act on one entry: a job in both tables, a purged job back).
-- An entry whose unique key a job in awa.jobs holds (inserted after this one left its
-- guarded states) is not retried: that would duplicate the job, and one such entry must
-- not hold back the rest, so the insert skips it (ON CONFLICT DO NOTHING) and it goes
-- back into the DLQ as it was. An entry whose key another DLQ entry guards (migration
-- 0031) is left where it is: the insert's trigger would fail the whole statement.
-- dlq_held_back names what stayed. Each queue is woken (notices are de-duplicated per
-- transaction). The caller refuses an empty filter unless allow_all.
WITH moved AS (
    DELETE FROM awa.dlq AS d
    WHERE (%(ids)s::bigint[] IS NULL OR d.id = ANY(%(ids)s::bigint[]))
      AND (%(kind)s::text IS NULL OR d.kind = %(kind)s::text)
      AND (%(queue)s::text IS NULL OR d.queue = %(queue)s::text)
      AND (%(older_than_ms)s::bigint IS NULL
           OR d.dlq_at < now() - %(older_than_ms)s::bigint * interval '1 millisecond')
      AND NOT EXISTS (
          SELECT 1 FROM awa.dlq AS o
          WHERE d.unique_key IS NOT NULL AND o.unique_key = d.unique_key AND o.id <> d.id
            AND awa.job_state_in_bitmask(o.unique_states, o.state))
    RETURNING d.*
), inserted AS (
INSERT INTO awa.jobs (
    id, kind, queue, args, state, priority, original_priority, attempt, max_attempts,
    run_lease, tags, metadata, progress, errors, created_at, run_at, unique_key,
    unique_states, ordering_key
)
SELECT id, kind, queue, args, 'available', original_priority, original_priority, 0,
    max_attempts, run_lease, tags, metadata, progress, errors, created_at, now(), unique_key,
    unique_states, ordering_key
FROM moved
ORDER BY id
ON CONFLICT DO NOTHING
RETURNING *
), kept AS (
    INSERT INTO awa.dlq SELECT m.* FROM moved AS m
    WHERE NOT EXISTS (SELECT 1 FROM inserted AS i WHERE i.id = m.id)
)
-- Either the retried jobs (the API), or how many (the CLI and the dashboard, which show a
-- count).
-- rows {
SELECT i.*, pg_notify('awa_available', i.queue) AS notified FROM inserted AS i
-- } rows
-- count {
, woken AS (
    SELECT pg_notify('awa_available', queue) FROM (SELECT DISTINCT queue FROM inserted) AS q
)
SELECT count(*) AS retried, (SELECT count(*) FROM woken) AS notified FROM inserted
-- } count
