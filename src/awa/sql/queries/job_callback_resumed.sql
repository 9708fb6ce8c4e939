-- job_callback_resumed: the waiting handler took its payload and goes on: the attempt's
-- deadline runs again with the time that was left when the wait began (NULL: none).
-- Lease-guarded like every write of an attempt.
UPDATE awa.jobs
SET deadline_at = CASE WHEN %(deadline_left_ms)s::bigint IS NULL THEN NULL
    ELSE now() + %(deadline_left_ms)s::bigint * interval '1 millisecond' END,
    heartbeat_at = now()
WHERE id = %(id)s AND run_lease = %(run_lease)s AND attempted_at = %(attempted_at)s
  AND state = 'running'
RETURNING id
