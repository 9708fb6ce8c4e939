-- job_fence_release: the fenced jobs whose handlers ended after their cancellation run
-- again at once (job_fence_hold held every fenced job). Only the retry the fence made:
-- the lease it gave (its own plus one) and still waiting.
UPDATE awa.jobs AS j
SET run_at = now()
FROM unnest(%(ids)s::bigint[], %(run_leases)s::bigint[]) AS f(id, run_lease)
WHERE j.id = f.id AND j.run_lease = f.run_lease + 1
  AND j.state = 'retryable' AND j.run_at > now()
