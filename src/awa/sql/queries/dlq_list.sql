-- dlq_list: dead-lettered jobs, most recently moved first, filtered by id, kind, queue
-- and age, one page at a time: a cursor (dlq_at, id) of the last row of the previous page
-- continues strictly after it (keyset paging: stable while rows come and go, no OFFSET
-- scan). Expects dlq_kind_idx / dlq_queue_idx / dlq_at_idx.
SELECT * FROM awa.dlq
WHERE (%(ids)s::bigint[] IS NULL OR id = ANY(%(ids)s::bigint[]))
  AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(older_than_ms)s::bigint IS NULL
       OR dlq_at < now() - %(older_than_ms)s::bigint * interval '1 millisecond')
  AND (%(before_at)s::timestamptz IS NULL
       OR (dlq_at, id) < (%(before_at)s::timestamptz, %(before_id)s::bigint))
ORDER BY dlq_at DESC, id DESC
LIMIT %(limit)s
