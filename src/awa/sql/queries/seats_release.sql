-- seats_release: take back parked seats (their queue got busy, paused, fleet-limited, or
-- the worker stops). Only free seats: one an open transaction has taken is locked by that
-- transaction and skipped here (SKIP LOCKED, never waiting for a producer); its commit
-- notifies this worker either way. Rows: the seats released, whose permits come back.
WITH mine AS (
    SELECT s.seat_id FROM awa.handoff_seats AS s
    WHERE s.seat_id = ANY (%(seats)s::bigint[]) AND s.job_id IS NULL
    FOR UPDATE SKIP LOCKED
)
DELETE FROM awa.handoff_seats AS s USING mine
WHERE s.seat_id = mine.seat_id
RETURNING s.seat_id
