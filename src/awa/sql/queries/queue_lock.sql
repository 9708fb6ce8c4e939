-- queue_lock: take one queue's claim lock for the rest of the transaction (ADR 0010).
-- Its own statement, before the write that needs it: in READ COMMITTED the next
-- statement's snapshot then holds every claim committed by earlier holders of the lock.
-- Once it holds the lock, it bounds every lock wait left in the transaction by
-- %(lock_wait)s: a completion holds the rows it finished while it waits for this lock
-- (its riding claim), so a writer re-keying running jobs that waited on such a row would
-- close a cycle that only deadlock detection (after deadlock_timeout, aborting either
-- side) would break. The writer gives way instead, and tries again (awa.client.fleet).
SELECT pg_advisory_xact_lock(1635213681, hashtext(%(queue)s::text)),
    set_config('lock_timeout', %(lock_wait)s::text, true)
