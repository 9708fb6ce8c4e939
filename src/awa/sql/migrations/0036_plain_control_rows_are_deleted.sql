-- 0036: a queue's control row lives only while it holds something.
-- Forward-only: never edit a shipped migration; add the next number instead.
--
-- Resume, clearing overrides and turning the DLQ off now delete a row of awa.queue_meta
-- they leave holding nothing (not paused, no override, no DLQ flag): such rows listed
-- every queue ever paused in queue_stats(), `awa queue list`, the dashboard and /metrics
-- for ever (a review's per-tenant churn: 18 rows a minute). This removes the ones earlier
-- releases left. Written to apply again over itself.

DELETE FROM awa.queue_meta AS m
WHERE NOT m.paused AND NOT m.dlq
  AND num_nonnulls(m.override_poll_interval_ms, m.override_claim_batch_size,
      m.override_rate_limit, m.override_deadline_ms, m.override_max_workers,
      m.override_min_workers, m.override_weight) = 0;
