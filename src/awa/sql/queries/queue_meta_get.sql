-- queue_meta_get: the control row of one queue (pause and runtime overrides), for the
-- admin API; workers read all their queues at once with queue_control_list.
SELECT queue, paused, paused_at, paused_by, override_poll_interval_ms,
    override_claim_batch_size, override_rate_limit, override_deadline_ms,
    override_max_workers, override_min_workers, override_weight, overrides_updated_at
FROM awa.queue_meta
WHERE queue = %(queue)s
