-- queue_meta_get: the control row of one queue (pause and runtime overrides).
-- Read by each dispatcher once per refresh cadence, never per poll.
SELECT queue, paused, paused_at, paused_by, override_poll_interval_ms,
    override_claim_batch_size, override_rate_limit, override_deadline_ms, overrides_updated_at
FROM awa.queue_meta
WHERE queue = %(queue)s
