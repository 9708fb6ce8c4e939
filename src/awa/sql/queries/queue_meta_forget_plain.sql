-- queue_meta_forget_plain: delete the control rows of these queues that hold nothing (not
-- paused, no override, no DLQ flag), so a retired queue — per-tenant queues, paused once
-- each — is not listed by queue_stats(), `awa queue list`, the dashboard and /metrics for
-- ever (a review's churn: 18 rows a minute). Run after a resume, a clear of overrides or a
-- DLQ flag turned off, in the same transaction: their write holds the row's lock, so this
-- decides on the row as written, never on a snapshot a concurrent pause or override has
-- since changed (a first version decided both in one statement, and lost resumes).
DELETE FROM awa.queue_meta AS m
WHERE m.queue = ANY (%(queues)s::text[]) AND NOT m.paused AND NOT m.dlq
  AND num_nonnulls(m.override_poll_interval_ms, m.override_claim_batch_size,
      m.override_rate_limit, m.override_deadline_ms, m.override_max_workers,
      m.override_min_workers, m.override_weight) = 0
