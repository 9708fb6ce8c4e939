-- dlq_list: dead-lettered jobs, most recently moved first, filtered by id, kind, queue
-- and age. Expects dlq_kind_idx / dlq_queue_idx / dlq_at_idx.
SELECT * FROM awa.dlq
WHERE (%(ids)s::bigint[] IS NULL OR id = ANY(%(ids)s::bigint[]))
  AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(older_than_ms)s::bigint IS NULL
       OR dlq_at < now() - %(older_than_ms)s::bigint * interval '1 millisecond')
ORDER BY dlq_at DESC, id DESC
LIMIT %(limit)s
