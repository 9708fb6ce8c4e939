-- queue_meta_pause: pause a queue. Claims check queue_meta in the same statement, so the
-- pause holds for every worker from the next claim; awa_control wakes them to report it.
WITH paused AS (
    INSERT INTO awa.queue_meta (queue, paused, paused_at, paused_by)
    VALUES (%(queue)s, true, now(), %(paused_by)s)
    ON CONFLICT (queue) DO UPDATE
    SET paused = true, paused_at = now(), paused_by = EXCLUDED.paused_by
    RETURNING queue
)
SELECT pg_notify('awa_control', json_build_object('queue_meta', queue)::text) FROM paused
