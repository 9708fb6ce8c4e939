-- job_list: newest first, filtered by whichever of state, kind and queue are given.
-- Whole rows for list_jobs, or (the other part left out) summaries for
-- list_job_summaries: those never read args, metadata or progress, so a listing of
-- jobs with large args neither detoasts nor sends them.
-- Each filter is a part of its own, left out when not given (awa.db.sql.job_list), and
-- the statement is planned for its values each time (never prepared): written as
-- "the state is null or equals it", the planner saw none of the values and walked the id
-- index backwards through every row — 1.4 s for `awa job list --state failed` over 2.5
-- million finished jobs, none failed; the partial indexes by state answer in 3 ms (a
-- review).
SELECT
-- rows {
  *
-- } rows
-- summaries {
  id, kind, queue, state, priority, attempt, max_attempts, tags, created_at, run_at,
  attempted_at, finalized_at, ordering_key, errors -> -1 ->> 'error' AS last_error
-- } summaries
FROM awa.jobs
WHERE true
-- state {
  AND state = %(state)s::awa.job_state
-- } state
-- kind {
  AND kind = %(kind)s::text
-- } kind
-- queue {
  AND queue = %(queue)s::text
-- } queue
ORDER BY id DESC
LIMIT %(limit)s
