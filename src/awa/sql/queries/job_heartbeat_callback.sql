-- job_heartbeat_callback: an external system says it is still working: push the
-- callback's timeout to now() + timeout.
UPDATE awa.jobs
SET callback_timeout_at = now() + %(timeout_ms)s::bigint * interval '1 millisecond'
WHERE callback_id = %(callback_id)s::uuid AND (state = 'waiting_external'
    OR (state = 'running' AND callback_lease = run_lease))
  AND (callback_timeout_at IS NULL OR callback_timeout_at > now())  -- not timed out
RETURNING *
