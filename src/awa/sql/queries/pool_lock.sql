-- pool_lock: take the fleet pool's claim lock for the rest of the transaction (ADR 0010);
-- its own statement for the same reason as queue_lock.
SELECT pg_advisory_xact_lock(1635213680, 0)
