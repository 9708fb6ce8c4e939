-- job_list: newest first, optionally filtered; the id index serves ORDER BY ... LIMIT.
-- Whole rows for list_jobs, or (the other part left out) summaries for
-- list_job_summaries: those never read args, metadata or progress, so a listing of
-- jobs with large args neither detoasts nor sends them.
SELECT
-- rows {
  *
-- } rows
-- summaries {
  id, kind, queue, state, priority, attempt, max_attempts, tags, created_at, run_at,
  attempted_at, finalized_at, ordering_key, errors -> -1 ->> 'error' AS last_error
-- } summaries
FROM awa.jobs
WHERE (%(state)s::awa.job_state IS NULL OR state = %(state)s::awa.job_state)
  AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
ORDER BY id DESC
LIMIT %(limit)s
