-- seats_prune: the leader deletes seats that lapsed a minute ago (their worker died
-- without releasing them). Free ones only; a lapsed seat is never taken anyway.
DELETE FROM awa.handoff_seats AS s
WHERE s.seat_id IN (
    SELECT f.seat_id FROM awa.handoff_seats AS f
    WHERE f.expires_at < now() - interval '1 minute' AND f.job_id IS NULL
    FOR UPDATE SKIP LOCKED)
