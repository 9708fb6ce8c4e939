-- seats_renew: the owner's seats live on for another TTL. Seats taken by a transaction
-- still open are skipped (locked; they are consumed at its commit).
UPDATE awa.handoff_seats AS s
SET expires_at = now() + %(ttl_ms)s::bigint * interval '1 millisecond'
FROM (
    SELECT f.seat_id FROM awa.handoff_seats AS f
    WHERE f.seat_id = ANY (%(seats)s::bigint[]) AND f.job_id IS NULL
    FOR UPDATE SKIP LOCKED
) AS free
WHERE s.seat_id = free.seat_id
