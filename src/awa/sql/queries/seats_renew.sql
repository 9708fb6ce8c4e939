-- seats_renew: the owner's seats live on for another TTL. Seats taken by a transaction
-- still open are skipped (locked; they are consumed at its commit).
-- Returns every seat of the list that still exists: renewed, or taken by a transaction
-- still open. One missing was consumed by a commit whose notice this worker never read (a
-- silent LISTEN connection): the worker gives its permit back, as a resync does; else
-- the permit stayed held for good (a review).
WITH renewed AS (
    UPDATE awa.handoff_seats AS s
    SET expires_at = now() + %(ttl_ms)s::bigint * interval '1 millisecond'
    FROM (
        SELECT f.seat_id FROM awa.handoff_seats AS f
        WHERE f.seat_id = ANY (%(seats)s::bigint[]) AND f.job_id IS NULL
        FOR UPDATE SKIP LOCKED
    ) AS free
    WHERE s.seat_id = free.seat_id
    RETURNING s.seat_id
)
SELECT r.seat_id FROM renewed AS r
UNION ALL
SELECT s.seat_id FROM awa.handoff_seats AS s
WHERE s.seat_id = ANY (%(seats)s::bigint[])
  AND NOT EXISTS (SELECT 1 FROM renewed AS r WHERE r.seat_id = s.seat_id)
