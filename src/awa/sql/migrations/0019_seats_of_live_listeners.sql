-- 0019: a single insert hands its job only to a seat whose worker still listens.
-- Forward-only: never edit a shipped migration; add the next number instead.
--
-- A handoff seat (0015) lapses 15 s after its worker last renewed it. A worker killed
-- (SIGKILL, a crashed host) left its seats free for that long, and a single insert took
-- one: its job was claimed for the dead worker at commit, waited for the heartbeat
-- rescue, and lost an attempt without running (a max_attempts=1 job failed, never run,
-- while a live worker sat idle). A seat now names its worker's LISTEN connection's
-- server process, which ends with the worker, and take_seat skips a seat whose process
-- is gone: the job stays available and its notice wakes a live worker. Only inserts that
-- find seats pay the check (one lookup in the backends' status array, per candidate).
ALTER TABLE awa.handoff_seats ADD COLUMN listener_pid integer;

CREATE OR REPLACE FUNCTION awa.take_seat(p_queue text, p_job bigint) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    UPDATE awa.handoff_seats AS s SET job_id = p_job
    WHERE s.seat_id = (
        SELECT t.seat_id FROM awa.handoff_seats AS t
        WHERE t.queue = p_queue AND t.job_id IS NULL AND t.expires_at > now()
          AND (t.listener_pid IS NULL
               OR EXISTS (SELECT 1 FROM pg_stat_get_activity(t.listener_pid)))
        LIMIT 1
        FOR UPDATE SKIP LOCKED);
    RETURN FOUND;
END
$$;
