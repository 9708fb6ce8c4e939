-- job_outcomes_stored: which of these attempts' outcomes are in the table, after the
-- server restarted while their durability was unknown (an asynchronous commit may have
-- been lost in a crash). An outcome is stored when its attempt's key still matches and
-- the row is no longer running under it; a lost outcome leaves the row running (it is
-- rescued and runs again, and its hooks fire then). Primary-key lookups.
SELECT j.id
FROM unnest(%(ids)s::bigint[], %(run_leases)s::bigint[], %(attempted_ats)s::timestamptz[])
    AS k(id, run_lease, attempted_at)
JOIN awa.jobs AS j
  ON j.id = k.id AND j.run_lease = k.run_lease AND j.attempted_at = k.attempted_at
WHERE j.state <> 'running'
