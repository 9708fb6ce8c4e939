-- 0020: a callback id resolves only for the attempt that registered it (CONTRACT §7).
-- Forward-only: never edit a shipped migration; add the next number instead.
--
-- A callback id stayed on the job when its attempt ended other than by waiting for it
-- (the handler raised after registering, the attempt was retried), so a late answer with
-- that id acted on the job's next attempt, which never asked. The registration now
-- records the attempt's run_lease, and an answer to a running job resolves only while
-- that attempt runs (every new attempt bumps run_lease). A job waiting for its callback
-- (waiting_external) was put there by the attempt that registered it. Nullable, no
-- default: adding it rewrites nothing; ids registered before it keep resolving.
ALTER TABLE awa.jobs ADD COLUMN callback_lease bigint;
UPDATE awa.jobs SET callback_lease = run_lease WHERE callback_id IS NOT NULL;
