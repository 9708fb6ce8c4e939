-- queue_meta_set_overrides: whole-state write of a queue's runtime overrides (design
-- record 038): every override column is replaced, so a NULL reverts that setting to the
-- start-time value. Stamps overrides_updated_at for audit and wakes live workers on
-- awa_control so they refresh before their next cadence tick. override_min_workers_at
-- moves only when min_workers changes (migration 0027: the order of conflicting minimums).
WITH written AS (
    INSERT INTO awa.queue_meta (
        queue, override_poll_interval_ms, override_claim_batch_size, override_rate_limit,
        override_deadline_ms, override_max_workers, override_min_workers, override_weight,
        overrides_updated_at, override_min_workers_at
    )
    VALUES (
        %(queue)s, %(poll_interval_ms)s, %(claim_batch_size)s, %(rate_limit)s,
        %(deadline_ms)s, %(max_workers)s, %(min_workers)s, %(weight)s, now(),
        CASE WHEN %(min_workers)s::integer IS NOT NULL THEN now() END
    )
    ON CONFLICT (queue) DO UPDATE
    SET override_poll_interval_ms = EXCLUDED.override_poll_interval_ms,
        override_claim_batch_size = EXCLUDED.override_claim_batch_size,
        override_rate_limit = EXCLUDED.override_rate_limit,
        override_deadline_ms = EXCLUDED.override_deadline_ms,
        override_max_workers = EXCLUDED.override_max_workers,
        override_min_workers = EXCLUDED.override_min_workers,
        override_weight = EXCLUDED.override_weight,
        overrides_updated_at = now(),
        override_min_workers_at = CASE
            WHEN EXCLUDED.override_min_workers IS NULL THEN NULL
            WHEN EXCLUDED.override_min_workers = queue_meta.override_min_workers
                THEN coalesce(queue_meta.override_min_workers_at, now())
            ELSE now() END
    RETURNING *
)
SELECT w.*, pg_notify('awa_control', json_build_object('queue_meta', w.queue)::text) AS notified
FROM written AS w
