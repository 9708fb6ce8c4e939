-- job_cancelled_among: of these attempts, the ids whose row an operator cancelled under
-- the attempt's own key. The heartbeat asks when attempts lost their lease, so a handler
-- stopped for a cancel is stopped as cancelled (and its hook fires) whether the cancel's
-- notice or the heartbeat reaches the worker first. Primary-key lookups.
SELECT j.id
FROM unnest(%(ids)s::bigint[], %(run_leases)s::bigint[], %(attempted_ats)s::timestamptz[])
    AS k(id, run_lease, attempted_at)
JOIN awa.jobs AS j
  ON j.id = k.id AND j.run_lease = k.run_lease AND j.attempted_at = k.attempted_at
WHERE j.state = 'cancelled'
