-- leader_lease_release: give the lease up on a clean shutdown, so another worker takes
-- over at its next campaign instead of waiting for the lease to expire.
UPDATE awa.leader_lease
SET expires_at = clock_timestamp(), holder_pid = NULL
WHERE epoch = %(epoch)s AND holder = %(holder)s
