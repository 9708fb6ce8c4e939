-- leader_try_lock: try to become the maintenance leader. A session-level advisory lock:
-- it is released when the holding connection ends, which is how a dead leader fails over.
SELECT pg_try_advisory_lock(%(key)s::bigint) AS acquired
