-- leader_lease_acquire: become the maintenance leader if the lease is free: expired (its
-- holder stopped renewing: frozen, partitioned, or shut down), held by no live backend
-- (its holder crashed: its connection, and so its backend, is gone — a failover as fast
-- as the session lock it replaces), or already ours (our connection dropped and came
-- back). Each acquisition bumps epoch: every maintenance statement of an earlier leader
-- is fenced from then on (awa.leader_holds). Times are the server's clock, never a
-- worker's. Returns the new epoch, or no row.
-- A leader whose connection goes through a transaction pooler (``watched`` false) has no
-- backend of its own to watch: the pooler may close the one a renewal ran on while the
-- leader lives on. Its holder_pid is 0, and only expiry frees its lease.
UPDATE awa.leader_lease AS l
SET epoch = l.epoch + 1,
    holder = %(holder)s,
    holder_pid = CASE WHEN %(watched)s::boolean THEN pg_backend_pid() ELSE 0 END,
    acquired_at = clock_timestamp(),
    expires_at = clock_timestamp() + %(lease_ms)s::bigint * interval '1 millisecond'
WHERE l.expires_at <= clock_timestamp()
   OR l.holder = %(holder)s
   OR l.holder_pid IS NULL
   OR (l.holder_pid <> 0
       AND NOT EXISTS (SELECT FROM pg_stat_activity AS a WHERE a.pid = l.holder_pid))
RETURNING l.epoch
