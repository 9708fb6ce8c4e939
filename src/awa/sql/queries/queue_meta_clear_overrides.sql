-- queue_meta_clear_overrides: a whole-state write with every override NULL (design record
-- 038's clear), as queue_meta_set_overrides does it, but only to a control row that
-- exists: clearing a queue that has none (a mistyped name) must not leave a row that
-- lists the queue for ever. Nor does a row left holding nothing (not paused, no DLQ flag):
-- it is deleted (and returns no row), so a queue is not listed for ever once its
-- overrides are cleared. The two branches' conditions exclude each other.
WITH forgotten AS (
    DELETE FROM awa.queue_meta AS m
    WHERE m.queue = %(queue)s AND NOT m.paused AND NOT m.dlq
    RETURNING pg_notify('awa_control', json_build_object('queue_meta', m.queue)::text)
), written AS (
    UPDATE awa.queue_meta AS m
    SET override_poll_interval_ms = NULL,
        override_claim_batch_size = NULL,
        override_rate_limit = NULL,
        override_deadline_ms = NULL,
        override_max_workers = NULL,
        override_min_workers = NULL,
        override_weight = NULL,
        override_min_workers_at = NULL,
        overrides_updated_at = now()
    WHERE m.queue = %(queue)s AND (m.paused OR m.dlq)
    RETURNING *
)
SELECT w.*, pg_notify('awa_control', json_build_object('queue_meta', w.queue)::text) AS notified
FROM written AS w
