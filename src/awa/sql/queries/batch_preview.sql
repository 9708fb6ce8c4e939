-- batch_preview: what a batch operation would change, changing nothing: how many jobs
-- match now (a window count, taken before the LIMIT) and the first of them by id. Its
-- WHERE is batch_submit's, so the preview and the operation select the same jobs.
-- States are the waiting ones (available, scheduled, retryable) or the one asked for;
-- jobs already at the target (queue; priority, both as it stands and as aging started
-- from) are left out. Filters by queue and state
-- use jobs_claim_idx / jobs_due_idx; by ids, the primary key.
SELECT count(*) OVER () AS total, j.*
FROM awa.jobs AS j
WHERE j.state = ANY(%(states)s::awa.job_state[])
  AND (%(kind)s::text IS NULL OR j.kind = %(kind)s::text)
  AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
  AND (%(ids)s::bigint[] IS NULL OR j.id = ANY(%(ids)s::bigint[]))
  AND (%(to_queue)s::text IS NULL OR j.queue <> %(to_queue)s::text)
  AND (%(to_priority)s::smallint IS NULL
           OR j.priority <> %(to_priority)s::smallint
           OR j.original_priority <> %(to_priority)s::smallint)
ORDER BY j.id
LIMIT %(sample)s
