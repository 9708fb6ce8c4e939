-- queue_partition_lock: before a change of a queue's partition_by (set or clear), wait for
-- every insert that keyed a job by the stored one (awa.partition_key_at_insert holds this
-- lock shared until its transaction ends, migration 0025), and keep new ones waiting until
-- the change commits: the re-keying statement that follows, its snapshot taken after this
-- wait, sees all their jobs. Its own statement, before queue_lock when it can be, so the
-- wait does not hold the queue's claims back.
SELECT pg_advisory_xact_lock(1635213683, hashtext(%(queue)s::text))
