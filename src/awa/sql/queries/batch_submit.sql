-- batch_submit: record a batch operation and the ids of the jobs it will visit, in one
-- statement (so an operation never exists without its items). The id is drawn first so
-- the items can name it; the foreign key is checked at the end of the statement, when
-- the operation row exists. The WHERE is batch_preview's.
WITH new_op AS (
    SELECT nextval(pg_get_serial_sequence('awa.batch_operations', 'id')) AS id
), items AS (
    INSERT INTO awa.batch_operation_items (operation_id, job_id)
    SELECT new_op.id, j.id
    FROM new_op, awa.jobs AS j
    WHERE j.state = ANY(%(states)s::awa.job_state[])
      AND (%(kind)s::text IS NULL OR j.kind = %(kind)s::text)
      AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
      AND (%(ids)s::bigint[] IS NULL OR j.id = ANY(%(ids)s::bigint[]))
      AND (%(to_queue)s::text IS NULL OR j.queue <> %(to_queue)s::text)
      AND (%(to_priority)s::smallint IS NULL
           OR j.priority <> %(to_priority)s::smallint
           OR j.original_priority <> %(to_priority)s::smallint)
    RETURNING job_id
)
INSERT INTO awa.batch_operations (id, op, spec, filter, chunk_size, total, submitted_by)
SELECT new_op.id, %(op)s, %(spec)s::jsonb, %(filter)s::jsonb, %(chunk_size)s,
    (SELECT count(*) FROM items), %(submitted_by)s
FROM new_op
RETURNING *
