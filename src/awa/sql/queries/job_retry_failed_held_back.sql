-- job_retry_failed_held_back: after job_retry_failed, the failed jobs of its filter it
-- left failed because another job guards their unique key (in awa.jobs, or a DLQ entry:
-- awa.unique_key_holder), each with that job: what the retry's warning names. At most
-- 20 (the warning is read by a person), each row with how many there are in all.
SELECT f.id, h.holder, count(*) OVER () AS total
FROM awa.jobs AS f
CROSS JOIN LATERAL (SELECT awa.unique_key_holder(f.unique_key) AS holder) AS h
WHERE f.state = 'failed' AND f.unique_key IS NOT NULL
  AND (%(kind)s::text IS NULL OR f.kind = %(kind)s::text)
  AND (%(queue)s::text IS NULL OR f.queue = %(queue)s::text)
  AND h.holder <> f.id
ORDER BY f.id
LIMIT 20
