-- dlq_held_back: after dlq_retry, the entries of its filter still in the DLQ because a job
-- in awa.jobs holds their unique key, each with that job (on jobs_unique_idx): what the
-- retry's warning names. At most 20: the warning is read by a person.
SELECT d.id, j.id AS holder
FROM awa.dlq AS d
JOIN awa.jobs AS j
  ON j.unique_key = d.unique_key AND awa.job_state_in_bitmask(j.unique_states, j.state)
WHERE d.unique_key IS NOT NULL
  AND (%(ids)s::bigint[] IS NULL OR d.id = ANY(%(ids)s::bigint[]))
  AND (%(kind)s::text IS NULL OR d.kind = %(kind)s::text)
  AND (%(queue)s::text IS NULL OR d.queue = %(queue)s::text)
  AND (%(older_than_ms)s::bigint IS NULL
       OR d.dlq_at < now() - %(older_than_ms)s::bigint * interval '1 millisecond')
ORDER BY d.id
LIMIT 20
