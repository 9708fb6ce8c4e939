-- leader_lease_acquire: become the maintenance leader if the lease is free: expired (its
-- holder stopped renewing: frozen, partitioned, or shut down), held by no live backend
-- (its holder crashed: its connection, and so its backend, is gone — a failover as fast
-- as the session lock it replaces), or already ours (our connection dropped and came
-- back). Each acquisition bumps epoch: every maintenance statement of an earlier leader
-- is fenced from then on (awa.leader_holds). Times are the server's clock, never a
-- worker's. Returns the new epoch, or no row.
UPDATE awa.leader_lease AS l
SET epoch = l.epoch + 1,
    holder = %(holder)s,
    holder_pid = pg_backend_pid(),
    acquired_at = clock_timestamp(),
    expires_at = clock_timestamp() + %(lease_ms)s::bigint * interval '1 millisecond'
WHERE l.expires_at <= clock_timestamp()
   OR l.holder = %(holder)s
   OR l.holder_pid IS NULL
   OR NOT EXISTS (SELECT FROM pg_stat_activity AS a WHERE a.pid = l.holder_pid)
RETURNING l.epoch
