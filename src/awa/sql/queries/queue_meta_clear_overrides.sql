-- queue_meta_clear_overrides: a whole-state write with every override NULL (design record
-- 038's clear), as queue_meta_set_overrides does it, but only to a control row that
-- exists: clearing a queue that has none (a mistyped name) must not leave a row that
-- lists the queue for ever.
WITH written AS (
    UPDATE awa.queue_meta
    SET override_poll_interval_ms = NULL,
        override_claim_batch_size = NULL,
        override_rate_limit = NULL,
        override_deadline_ms = NULL,
        override_max_workers = NULL,
        override_min_workers = NULL,
        override_weight = NULL,
        override_min_workers_at = NULL,
        overrides_updated_at = now()
    WHERE queue = %(queue)s
    RETURNING *
)
SELECT w.*, pg_notify('awa_control', json_build_object('queue_meta', w.queue)::text) AS notified
FROM written AS w
