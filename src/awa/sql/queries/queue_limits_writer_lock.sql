-- queue_limits_writer_lock: one writer of a queue's fleet limits at a time (set or clear),
-- taken first: the writer then reads the stored partition_by knowing no other writer can
-- change it, and takes the partitioning lock (if partition_by changes) and the claim lock
-- in that order, as every writer does — two writers taking them in different orders
-- deadlocked (session 25's review).
SELECT pg_advisory_xact_lock(1635213684, hashtext(%(queue)s::text))
