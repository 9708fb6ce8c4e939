-- job_finalize_many: record a batch of handler outcomes in one statement (array params).
-- Lease-guarded: a row changes only while it is still running under the attempt's
-- run_lease, so a stale attempt (rescued, cancelled or re-claimed) is never applied.
-- The ids that come back are the outcomes that took effect; the rest were stale.
--   state      completed | retryable | scheduled (snooze) | failed | cancelled
--   delay_ms   NULL keeps run_at; otherwise run_at = now() + delay (retry backoff, snooze)
--   refund     true when the attempt does not count (snooze)
--   error      NULL, or one {error, attempt, at, type} entry to append to errors
--   progress   NULL keeps the stored progress; otherwise the attempt's latest (job features)
--   metadata   NULL, or the keys the attempt updated, merged into metadata
UPDATE awa.jobs AS j
SET state = o.state,
    run_at = CASE WHEN o.delay_ms IS NULL THEN j.run_at
        ELSE now() + o.delay_ms * interval '1 millisecond' END,
    finalized_at = CASE WHEN o.state IN ('completed', 'failed', 'cancelled') THEN now() END,
    attempt = CASE WHEN o.refund THEN j.attempt - 1 ELSE j.attempt END,
    errors = CASE WHEN o.error IS NULL THEN j.errors
        ELSE j.errors || jsonb_build_array(o.error || jsonb_build_object('at', now())) END,
    progress = CASE WHEN o.state = 'completed' THEN NULL
        ELSE coalesce(o.progress, j.progress) END,
    metadata = CASE WHEN o.metadata IS NULL THEN j.metadata ELSE j.metadata || o.metadata END,
    heartbeat_at = NULL
FROM unnest(
    %(ids)s::bigint[], %(run_leases)s::bigint[], %(states)s::awa.job_state[],
    %(delays_ms)s::float8[], %(refunds)s::boolean[], %(errors)s::jsonb[],
    %(progress)s::jsonb[], %(metadata)s::jsonb[]
) AS o(id, run_lease, state, delay_ms, refund, error, progress, metadata)
WHERE j.id = o.id AND j.run_lease = o.run_lease AND j.state = 'running'
RETURNING j.id
