-- dlq_held_back: after dlq_retry, the entries of its filter still in the DLQ because
-- another job guards their unique key — in awa.jobs (on jobs_unique_idx), else another
-- DLQ entry (dlq_unique_key_idx) — each with that job: what the retry's warning names.
-- At most 20 (the warning is read by a person), each row with how many there are in all.
SELECT d.id, h.id AS holder, count(*) OVER () AS total
FROM awa.dlq AS d
CROSS JOIN LATERAL (
    (SELECT j.id FROM awa.jobs AS j
     WHERE j.unique_key = d.unique_key AND awa.job_state_in_bitmask(j.unique_states, j.state)
     LIMIT 1)
    UNION ALL
    (SELECT o.id FROM awa.dlq AS o
     WHERE o.unique_key = d.unique_key AND o.id <> d.id
       AND awa.job_state_in_bitmask(o.unique_states, o.state)
     LIMIT 1)
    LIMIT 1
) AS h
WHERE d.unique_key IS NOT NULL
  AND (%(ids)s::bigint[] IS NULL OR d.id = ANY(%(ids)s::bigint[]))
  AND (%(kind)s::text IS NULL OR d.kind = %(kind)s::text)
  AND (%(queue)s::text IS NULL OR d.queue = %(queue)s::text)
  AND (%(older_than_ms)s::bigint IS NULL
       OR d.dlq_at < now() - %(older_than_ms)s::bigint * interval '1 millisecond')
ORDER BY d.id
LIMIT 20
