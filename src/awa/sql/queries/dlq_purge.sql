-- dlq_purge: delete dead-lettered jobs for good; returns how many went. The caller
-- refuses an empty filter unless allow_all.
DELETE FROM awa.dlq
WHERE (%(ids)s::bigint[] IS NULL OR id = ANY(%(ids)s::bigint[]))
  AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(older_than_ms)s::bigint IS NULL
       OR dlq_at < now() - %(older_than_ms)s::bigint * interval '1 millisecond')
