-- job_finalize_many: record a batch of handler outcomes and, in the same transaction,
-- claim the next jobs for the dispatchers riding on this write (ADR 0012): one round trip
-- per batch where a claim of its own would be a second.
-- The outcomes arrive as ONE jsonb array of records (not one array parameter per column):
-- encoding it is a single C-level json.dumps, about half the client CPU of seven arrays.
-- Lease-guarded: a row changes only while it is still running under the attempt's
-- (run_lease, attempted_at), so a stale attempt (rescued, cancelled or re-claimed — even
-- re-claimed after a crash lost an asynchronous claim) is never applied.
-- The commit may be asynchronous (ADR 0006): a lost outcome leaves the job running under
-- a lease nobody renews, and the rescuer returns it (at least once).
--   state      completed | retryable | scheduled (snooze) | failed | cancelled
--   delay_ms   NULL keeps run_at; otherwise run_at = now() + delay (retry backoff, snooze)
--   refund     true when the attempt does not count (snooze)
--   error      NULL, or one {error, attempt, type, ...} entry to append to errors
--   progress   absent keeps the stored progress; otherwise the attempt's latest (job features)
--   metadata   absent, or the keys the attempt updated, merged into metadata
-- %(claims)s: NULL, or [{queue, limit, deadline_ms, instance, held}] — each claimed by
-- awa.claim (instance and held: as in job_claim_available) after the
-- outcomes are written, so slots they free (a fleet cap, the fleet pool) count as free.
-- Rows (awa.complete_and_claim, migration 0007): ('applied', id) for each outcome that took
-- effect (the rest were stale); ('claimed', job columns) for each job claimed, or a hold
-- (NULL id, blocked, retry_in_ms) when the fleet held a claim back. id comes first.
SELECT c.id, c.row_type, c.claim_queue, c.kind, c.queue, c.args, c.state, c.priority,
    c.attempt, c.max_attempts, c.run_lease, c.tags, c.metadata, c.progress, c.errors,
    c.created_at, c.run_at, c.attempted_at, c.deadline_at, c.finalized_at, c.ordering_key,
    c.blocked, c.retry_in_ms
FROM awa.complete_and_claim(
    %(outcomes)s::jsonb, %(synchronous_commit)s::text, %(claims)s::jsonb
) AS c
