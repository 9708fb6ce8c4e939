-- queue_running_lock: before a change of partition_by re-keys a queue's running jobs,
-- lock them (in id order, as a completion's write takes its rows), before the claim lock:
-- a completion writes its outcomes, then waits for the claim lock of its riding claim, so
-- a writer holding the claim lock and waiting on those rows closed a cycle. Locked first,
-- only the jobs claimed between this statement and the claim lock can still be in one.
SELECT count(*) FROM (
    SELECT 1 FROM awa.jobs AS j
    WHERE j.queue = %(queue)s::text AND j.state = 'running'
    ORDER BY j.id
    FOR UPDATE
) AS locked
