-- queue_lock: take one queue's claim lock for the rest of the transaction (ADR 0010).
-- Its own statement, before the write that needs it: in READ COMMITTED the next
-- statement's snapshot then holds every claim committed by earlier holders of the lock.
SELECT pg_advisory_xact_lock(1635213681, hashtext(%(queue)s::text))
