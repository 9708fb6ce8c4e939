-- job_list: newest first, optionally filtered; the id index serves ORDER BY ... LIMIT.
SELECT * FROM awa.jobs
WHERE (%(state)s::awa.job_state IS NULL OR state = %(state)s::awa.job_state)
  AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
ORDER BY id DESC
LIMIT %(limit)s
