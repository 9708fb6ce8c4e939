-- job_claim_available: a dispatcher's own claim of up to %(limit)s jobs of one queue, in one
-- round trip. The dispatcher holds one permit per row it may receive (permit before
-- claim). awa.claim (last restated by migration 0016) takes the plain path — FOR UPDATE
-- SKIP LOCKED on jobs_claim_idx (queue, priority, run_at, id) WHERE state = 'available'
-- AND partition_key IS NULL AND ordering_key IS NULL, so dispatchers in other processes
-- take disjoint rows; a pause is effective on
-- the very next claim of every worker (ADR 0004) — or, for a queue under fleet limits or in
-- the fleet pool, awa.claim_coordinated (ADR 0010), which may hold jobs back and then
-- returns a last row with a NULL id saying why (blocked, retry_in_ms). A pool member's
-- claim names its process (%(instance)s) and the member's jobs it holds (%(held)s), and is
-- cut to that process's part of the member's share (migration 0011, ADR 0037).
-- Each claim starts a new attempt: attempt and run_lease go up by one, and every later
-- write of this attempt must match (id, run_lease, attempted_at, state = 'running').
-- The commit may be asynchronous (%(synchronous_commit)s, see ADR 0006): a claim lost in a
-- server crash is re-made later with the same run_lease but a later attempted_at, and
-- every fenced write matches attempted_at too, so the lost attempt stays fenced.
-- The claims of a busy queue usually ride on the completer's writes instead
-- (job_finalize_many, ADR 0012); this one serves a queue that wakes up.
SELECT * FROM awa.claim(
    %(queue)s::text, %(limit)s::integer, %(deadline_ms)s::bigint, %(synchronous_commit)s::text,
    %(instance)s::text, %(held)s::integer
)
