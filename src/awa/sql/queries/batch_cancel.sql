-- batch_cancel: stop an open batch operation. It waits for a chunk in flight (the chunk
-- holds the row lock) and no chunk runs after it; what was changed stays changed. The
-- items go; the counts stay. An operation already ended is returned unchanged.
WITH cancelled AS (
    UPDATE awa.batch_operations
    SET state = 'cancelled', updated_at = now(), finalized_at = now()
    WHERE id = %(id)s AND state IN ('pending', 'running')
    RETURNING *
), items AS (
    DELETE FROM awa.batch_operation_items
    WHERE operation_id = (SELECT id FROM cancelled)
)
SELECT * FROM cancelled
