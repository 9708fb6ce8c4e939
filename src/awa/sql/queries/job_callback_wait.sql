-- job_callback_wait: a handler starts waiting for its callback inside the attempt
-- (job.wait_for_callback). The row stays running under the same lease — the handler still
-- holds its permit and counts against every limit, fleet caps included — and only its
-- deadline is suspended (deadline_at NULL: the callback's own timeout bounds the wait).
-- No row: the answer already came (resume_external cleared the id) or the attempt lost
-- its lease; the caller reads job_callback_state to tell which.
UPDATE awa.jobs
SET deadline_at = NULL
WHERE id = %(id)s AND run_lease = %(run_lease)s AND attempted_at = %(attempted_at)s
  AND state = 'running' AND callback_id = %(callback_id)s::uuid
RETURNING id
