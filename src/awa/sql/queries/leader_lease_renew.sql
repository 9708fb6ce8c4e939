-- leader_lease_renew: extend our lease. Matches only while the epoch is still ours, so a
-- leader that was frozen past its lease and replaced finds no row and steps down; one
-- that nobody replaced (the epoch did not move) carries on, as no one else has acted.
-- holder_pid follows the backend of each renewal: behind a transaction pooler (PgBouncer)
-- that backend changes, and the one of the acquisition may be closed by the pooler while
-- the leader lives on — which must not read as a crashed leader.
UPDATE awa.leader_lease
SET expires_at = clock_timestamp() + %(lease_ms)s::bigint * interval '1 millisecond',
    holder_pid = pg_backend_pid()
WHERE epoch = %(epoch)s AND holder = %(holder)s
RETURNING epoch
