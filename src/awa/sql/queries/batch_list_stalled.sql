-- batch_list_stalled: open batch operations to carry on: submitted without anyone running
-- them (pending), or not advanced for a while (their caller went away). Run by the
-- maintenance leader; chunks lock the operation row, so running one that its submitter
-- also runs is safe (they alternate). Expects batch_operations_open_idx.
SELECT id FROM awa.batch_operations
WHERE state = 'pending'
   OR (state = 'running'
       AND updated_at < now() - %(stale_ms)s::bigint * interval '1 millisecond')
ORDER BY id
LIMIT %(limit)s
