-- queue_limits_lock: before queue_limits_set or _clear changes a queue's partition_by, wait
-- for every transaction that keyed a job by the stored one at its insert (job_insert reads
-- it FOR SHARE) to end, and keep new ones waiting until this one ends: the re-keying
-- statement that follows, with a snapshot taken after this wait, then sees all their
-- jobs. Taken before queue_lock, in the order an insert could meet them.
SELECT 1 FROM awa.queue_limits WHERE queue = %(queue)s::text FOR NO KEY UPDATE
