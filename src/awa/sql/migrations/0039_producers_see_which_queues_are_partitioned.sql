-- 0039: a single insert asks whether its queue is partitioned before calling for its key.
-- Forward-only: never edit a shipped migration; add the next number instead.
--
-- Every single insert of a job available now called awa.partition_key_at_insert (0025),
-- a SECURITY DEFINER function (a producer may not read awa.queue_limits): a function call,
-- its search_path set and restored, and a query: ~10 µs of the server's ~120 µs an insert
-- (pgbench, one prepared insert a transaction, alternated: 91–106 µs with the call, 83–93
-- without it, 87–88 asking this view first), paid for the few queues that are partitioned. This view tells any role which queues those are, and
-- nothing else: job_insert.sql calls the function only for them. The function reads
-- partition_by again and takes its lock as before, so a change of partition_by racing
-- with the insert is handled as it was (the first read of the function was as unlocked
-- as this one). security_barrier: a caller's own function in a WHERE on the view cannot
-- see the rows the view leaves out (queues limited but not partitioned).
-- Written to apply again over itself (the Django integration's test replays the newest).

CREATE OR REPLACE VIEW awa.partitioned_queues WITH (security_barrier) AS
    SELECT l.queue FROM awa.queue_limits AS l WHERE l.partition_by IS NOT NULL;

GRANT SELECT ON awa.partitioned_queues TO PUBLIC;
