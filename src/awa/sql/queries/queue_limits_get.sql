-- queue_limits_get: the stored fleet limits of one queue (none: unlimited).
SELECT queue, concurrency, rate_limit, burst, partition_by, updated_at
FROM awa.queue_limits
WHERE queue = %(queue)s
