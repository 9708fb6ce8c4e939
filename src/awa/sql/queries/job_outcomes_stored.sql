-- job_outcomes_stored: which of these attempts' outcomes are in the table, after the
-- server restarted while their durability was unknown (an asynchronous commit may have
-- been lost in a crash). An outcome is stored when its attempt's key still matches and
-- the row is no longer running under it; a lost outcome leaves the row running (it is
-- rescued and runs again, and its hooks fire then). Primary-key lookups.
-- Answers with the positions of the stored attempts in the arrays, not job ids: two
-- attempts of one job may be asked about together (one lost in the crash, the re-run
-- that replaced it), and only the one whose key matches is stored.
SELECT k.n
FROM unnest(%(ids)s::bigint[], %(run_leases)s::bigint[], %(attempted_ats)s::timestamptz[])
    WITH ORDINALITY AS k(id, run_lease, attempted_at, n)
JOIN awa.jobs AS j
  ON j.id = k.id AND j.run_lease = k.run_lease AND j.attempted_at = k.attempted_at
WHERE j.state <> 'running'
