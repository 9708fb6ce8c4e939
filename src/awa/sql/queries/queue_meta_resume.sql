-- queue_meta_resume: resume a queue and wake its dispatchers.
WITH resumed AS (
    INSERT INTO awa.queue_meta (queue, paused)
    VALUES (%(queue)s, false)
    ON CONFLICT (queue) DO UPDATE SET paused = false, paused_at = NULL, paused_by = NULL
    RETURNING queue
)
SELECT pg_notify('awa_control', json_build_object('queue_meta', queue)::text),
       pg_notify('awa_available', queue)
FROM resumed
