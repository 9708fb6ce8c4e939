-- batch_list_stalled: open batch operations to carry on: submitted without anyone running
-- them (pending), or not advanced for a while (their caller went away). Run by the
-- maintenance leader; chunks lock the operation row, so running one that its submitter
-- also runs is safe (they alternate). Expects batch_operations_open_idx.
-- %(carrying)s: the operations this leader advanced at its previous tick. Its own chunks
-- move updated_at, so without them an operation it carries looked advanced by someone
-- and waited stale_ms between its bursts of chunks (a review: 100 chunks, then 5 s idle).
SELECT id FROM awa.batch_operations
WHERE state = 'pending'
   OR (state = 'running'
       AND (updated_at < now() - %(stale_ms)s::bigint * interval '1 millisecond'
            OR id = ANY(%(carrying)s::bigint[])))
ORDER BY id
LIMIT %(limit)s
