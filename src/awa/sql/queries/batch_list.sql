-- batch_list: batch operations, newest first, optionally of one state.
SELECT * FROM awa.batch_operations
WHERE %(state)s::text IS NULL OR state = %(state)s::text
ORDER BY id DESC
LIMIT %(limit)s
