-- queue_meta_resume: resume a queue and wake its dispatchers. A queue with no control row
-- was never paused: nothing is written (a mistyped name must not leave a row that lists
-- the queue for ever) and nobody is woken. A row that holds nothing else (no override, no
-- DLQ flag) is deleted rather than kept all defaults: per-tenant queues paused once each
-- were listed by queue_stats() for ever (a review: 18 rows a minute). The two branches'
-- conditions exclude each other, so each row is either deleted or updated.
WITH forgotten AS (
    DELETE FROM awa.queue_meta AS m
    WHERE m.queue = %(queue)s AND NOT m.dlq
      AND num_nonnulls(m.override_poll_interval_ms, m.override_claim_batch_size,
          m.override_rate_limit, m.override_deadline_ms, m.override_max_workers,
          m.override_min_workers, m.override_weight) = 0
    RETURNING m.queue
), resumed AS (
    UPDATE awa.queue_meta AS m
    SET paused = false, paused_at = NULL, paused_by = NULL
    WHERE m.queue = %(queue)s
      AND (m.dlq OR num_nonnulls(m.override_poll_interval_ms, m.override_claim_batch_size,
          m.override_rate_limit, m.override_deadline_ms, m.override_max_workers,
          m.override_min_workers, m.override_weight) > 0)
    RETURNING m.queue
)
SELECT pg_notify('awa_control', json_build_object('queue_meta', q.queue)::text),
       pg_notify('awa_available', q.queue)
FROM (SELECT queue FROM forgotten UNION ALL SELECT queue FROM resumed) AS q
