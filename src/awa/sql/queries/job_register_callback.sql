-- job_register_callback: give a running attempt a fresh callback id and its timeout.
-- Lease-guarded: an attempt that lost its lease cannot hand out a token for the job.
-- A new id replaces any earlier one, so tokens of earlier attempts stop resolving.
UPDATE awa.jobs
SET callback_id = %(callback_id)s::uuid, callback_lease = run_lease,
    callback_timeout_at = now() + %(timeout_ms)s::bigint * interval '1 millisecond'
WHERE id = %(id)s AND run_lease = %(run_lease)s AND attempted_at = %(attempted_at)s
  AND state = 'running'
RETURNING callback_id
