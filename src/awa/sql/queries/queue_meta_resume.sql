-- queue_meta_resume: resume a queue and wake its dispatchers. A queue with no control row
-- was never paused: nothing is written (a mistyped name must not leave a row that lists
-- the queue for ever) and nobody is woken.
WITH resumed AS (
    UPDATE awa.queue_meta
    SET paused = false, paused_at = NULL, paused_by = NULL
    WHERE queue = %(queue)s
    RETURNING queue
)
SELECT pg_notify('awa_control', json_build_object('queue_meta', queue)::text),
       pg_notify('awa_available', queue)
FROM resumed
