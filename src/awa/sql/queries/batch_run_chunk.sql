-- batch_run_chunk: carry out the next chunk of a batch operation, atomically with its
-- progress. The operation row is locked first, so chunks of one operation never overlap
-- (any process may run them: the caller that submitted it, `awa batch resume`, or the
-- maintenance leader after the caller went away), and a cancel waits for the chunk in
-- flight, then no chunk follows. The next chunk_size items past cursor_id are visited in
-- id order; a job changes only if it still matches the filter as submitted (state, kind,
-- queue) and is not at the target yet (for a priority: neither as it stands nor as it
-- returns to after aging) — the rest count as skipped. set_priority sets
-- original_priority too, so promotion keeps the new level, and aging_from, so aging
-- counts from the change (migration 0033). A moved job
-- leaves its partition_key NULL (its new queue's claim adopts it under its own
-- partition_by); moved available jobs wake their new queue. A chunk shorter than chunk_size is the last: the
-- operation completes and its items go.
WITH op AS (
    SELECT * FROM awa.batch_operations
    WHERE id = %(id)s AND state IN ('pending', 'running')
    FOR UPDATE
), chunk AS (
    SELECT i.job_id FROM awa.batch_operation_items AS i, op
    WHERE i.operation_id = op.id AND i.job_id > op.cursor_id
    ORDER BY i.job_id
    LIMIT (SELECT chunk_size FROM op)
), locked AS (
    -- The chunk's jobs locked in id order before any changes (ADR 0050), whatever order
    -- the update's plan visits them in: a drain of the queue locks in the same order.
    SELECT j.id FROM awa.jobs AS j, op
    WHERE j.id IN (SELECT c.job_id FROM chunk AS c)
      AND j.state::text IN (SELECT jsonb_array_elements_text(op.filter -> 'states'))
    ORDER BY j.id
    FOR UPDATE OF j
), changed AS (
    UPDATE awa.jobs AS j
    SET queue = coalesce(op.spec ->> 'queue', j.queue),
        partition_key = CASE WHEN op.spec ->> 'queue' IS NULL THEN j.partition_key END,
        priority = coalesce((op.spec ->> 'priority')::smallint, j.priority),
        original_priority = coalesce((op.spec ->> 'priority')::smallint, j.original_priority),
        aging_from = CASE WHEN op.spec ->> 'priority' IS NULL THEN j.aging_from ELSE now() END
    FROM op, chunk
    WHERE j.id = chunk.job_id
      AND j.state::text IN (SELECT jsonb_array_elements_text(op.filter -> 'states'))
      AND (op.filter ->> 'kind' IS NULL OR j.kind = op.filter ->> 'kind')
      AND (op.filter ->> 'queue' IS NULL OR j.queue = op.filter ->> 'queue')
      AND (op.spec ->> 'queue' IS NULL OR j.queue <> op.spec ->> 'queue')
      AND (op.spec ->> 'priority' IS NULL
           OR j.priority <> (op.spec ->> 'priority')::smallint
           OR j.original_priority <> (op.spec ->> 'priority')::smallint)
      AND (SELECT count(*) FROM locked) >= 0  -- a gate the update passes once
    RETURNING j.id, j.queue, j.state
), woken AS (
    SELECT pg_notify('awa_available', q.queue)
    FROM (SELECT DISTINCT queue FROM changed WHERE state = 'available') AS q
), finished AS (
    DELETE FROM awa.batch_operation_items
    WHERE operation_id = (SELECT id FROM op)
      AND (SELECT count(*) FROM chunk) < (SELECT chunk_size FROM op)
)
UPDATE awa.batch_operations AS b
SET cursor_id = coalesce((SELECT max(job_id) FROM chunk), b.cursor_id),
    processed = b.processed + (SELECT count(*) FROM changed),
    skipped = b.skipped + (SELECT count(*) FROM chunk) - (SELECT count(*) FROM changed),
    state = CASE WHEN (SELECT count(*) FROM chunk) < b.chunk_size THEN 'completed'
        ELSE 'running' END,
    started_at = coalesce(b.started_at, now()),
    updated_at = now(),
    finalized_at = CASE WHEN (SELECT count(*) FROM chunk) < b.chunk_size THEN now() END
FROM op
WHERE b.id = op.id
RETURNING b.*, (SELECT count(*) FROM woken) AS notified
