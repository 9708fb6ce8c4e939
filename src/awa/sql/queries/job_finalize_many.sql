-- job_finalize_many: record a batch of handler outcomes in one statement.
-- The batch arrives as ONE jsonb array of records (not one array parameter per column):
-- encoding it is a single C-level json.dumps, about half the client CPU of seven arrays.
-- Lease-guarded: a row changes only while it is still running under the attempt's
-- (run_lease, attempted_at), so a stale attempt (rescued, cancelled or re-claimed — even
-- re-claimed after a crash lost an asynchronous claim) is never applied.
-- The commit may be asynchronous (ADR 0006): a lost outcome leaves the job running under
-- a lease nobody renews, and the rescuer returns it (at least once).
-- The ids that come back are the outcomes that took effect; the rest were stale.
-- A job leaving `running` frees a fleet slot when its queue has a fleet concurrency cap
-- or is a fleet-pool member: such queues (and, for the pool, every member) are woken by
-- an awa_control {"freed": queue} notice, so a claimer waiting at the limit anywhere in
-- the fleet claims at once instead of at its next poll (ADR 0010). Unlimited queues cost
-- two probes of tiny tables.
--   state      completed | retryable | scheduled (snooze) | failed | cancelled
--   delay_ms   NULL keeps run_at; otherwise run_at = now() + delay (retry backoff, snooze)
--   refund     true when the attempt does not count (snooze)
--   error      NULL, or one {error, attempt, type, ...} entry to append to errors
--   progress   absent keeps the stored progress; otherwise the attempt's latest (job features)
--   metadata   absent, or the keys the attempt updated, merged into metadata
WITH done AS (
UPDATE awa.jobs AS j
SET state = o.state,
    run_at = CASE WHEN o.delay_ms IS NULL THEN j.run_at
        ELSE now() + o.delay_ms * interval '1 millisecond' END,
    finalized_at = CASE WHEN o.state IN ('completed', 'failed', 'cancelled') THEN now() END,
    attempt = CASE WHEN o.refund THEN j.attempt - 1 ELSE j.attempt END,
    errors = CASE WHEN o.error IS NULL THEN j.errors
        ELSE awa.errors_append(j.errors, jsonb_build_array(o.error || jsonb_build_object('at', now())))
        END,
    progress = CASE WHEN o.state = 'completed' THEN NULL
        ELSE coalesce(o.progress, j.progress) END,
    metadata = CASE WHEN o.metadata IS NULL THEN j.metadata ELSE j.metadata || o.metadata END,
    heartbeat_at = NULL
FROM jsonb_to_recordset(%(outcomes)s::jsonb) AS o(
        id bigint, run_lease bigint, attempted_at timestamptz, state awa.job_state,
        delay_ms float8, refund boolean, error jsonb, progress jsonb, metadata jsonb
    ),
    (SELECT set_config('synchronous_commit', %(synchronous_commit)s, true)) AS commit_mode
WHERE j.id = o.id AND j.run_lease = o.run_lease AND j.attempted_at = o.attempted_at
  AND j.state = 'running'
RETURNING j.id, j.queue
), freed AS (
    SELECT pg_notify('awa_control', json_build_object('freed', w.queue)::text)
    FROM (
        SELECT l.queue FROM awa.queue_limits AS l
        WHERE l.concurrency IS NOT NULL AND l.queue IN (SELECT queue FROM done)
        UNION
        SELECT p.queue FROM awa.fleet_pool_members AS p
        WHERE EXISTS (SELECT 1 FROM done JOIN awa.fleet_pool_members AS m USING (queue))
    ) AS w
)
SELECT id FROM done WHERE (SELECT count(*) FROM freed) >= 0
