-- seats_resync: after the worker's LISTEN connection came back, notices sent meanwhile
-- are lost: release every free seat it still has, and say which of the others still
-- exist (taken by a transaction not yet committed: its notice will come). Seats in
-- neither list were consumed while nothing listened; their permits come back, and a job
-- handed over then is returned by the rescuer once its heartbeat is stale.
WITH freed AS (
    DELETE FROM awa.handoff_seats AS s
    WHERE s.seat_id IN (
        SELECT f.seat_id FROM awa.handoff_seats AS f
        WHERE f.seat_id = ANY (%(seats)s::bigint[]) AND f.job_id IS NULL
        FOR UPDATE SKIP LOCKED)
    RETURNING s.seat_id
)
SELECT f.seat_id, true AS freed FROM freed AS f
UNION ALL
SELECT s.seat_id, false FROM awa.handoff_seats AS s
WHERE s.seat_id = ANY (%(seats)s::bigint[])
  AND NOT EXISTS (SELECT 1 FROM freed AS f WHERE f.seat_id = s.seat_id)
