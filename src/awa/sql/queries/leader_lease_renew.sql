-- leader_lease_renew: extend our lease. Matches only while the epoch is still ours, so a
-- leader that was frozen past its lease and replaced finds no row and steps down; one
-- that nobody replaced (the epoch did not move) carries on, as no one else has acted.
-- holder_pid follows the backend of each renewal on a direct connection (a reconnect
-- gets a new one). Behind a transaction pooler (``watched`` false) it stays 0: the
-- backend changes from statement to statement, and the pooler may close one while the
-- leader lives on, which must not read as a crashed leader (leader_lease_acquire).
UPDATE awa.leader_lease
SET expires_at = clock_timestamp() + %(lease_ms)s::bigint * interval '1 millisecond',
    holder_pid = CASE WHEN %(watched)s::boolean THEN pg_backend_pid() ELSE 0 END
WHERE epoch = %(epoch)s AND holder = %(holder)s
RETURNING epoch
