-- job_retry_held_by: after job_retry changed nothing, the job guarding the unique key
-- that kept it from being retried (in awa.jobs or the DLQ), if that was why.
SELECT h.holder
FROM awa.jobs AS j
CROSS JOIN LATERAL (SELECT awa.unique_key_holder(j.unique_key) AS holder) AS h
WHERE j.id = %(id)s AND j.unique_key IS NOT NULL AND h.holder <> j.id
