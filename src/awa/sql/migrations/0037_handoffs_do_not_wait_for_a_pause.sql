-- 0037: a producer's commit does not wait for a pause that has not committed.
-- Forward-only: never edit a shipped migration; add the next number instead.
--
-- 0035 made every claim *try* the pause gate (ADR 0042 amended); the claim at a single
-- insert's commit that hands the job to a parked seat (0015's awa.handoff_at_commit)
-- still waited for it, so a pause left open in an operator's transaction stalled every
-- producer's insert into that queue — and whatever else their transactions held — for as
-- long as it stayed open (a review of the session's change). It now tries the gate too:
-- when a pause holds it, the seat is freed and the job claimed the usual way (which finds
-- the queue paused once the pause commits). And it hands over only in a READ COMMITTED
-- transaction: under REPEATABLE READ or SERIALIZABLE the trigger's checks read the
-- producer's snapshot, older than a pause that committed before the producer did, and the
-- job ran on the paused queue (a review; in 0015 as well). There the usual claim, in a
-- transaction of its own, decides. The function is restated whole (0015's body).

CREATE OR REPLACE FUNCTION awa.handoff_at_commit() RETURNS trigger LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_job record;
    v_gate boolean;
BEGIN
    DELETE FROM awa.handoff_seats WHERE seat_id = NEW.seat_id;
    -- The pause gate, as every claim takes it (0014), tried in a statement of its own (the
    -- decision below then sees a pause that committed before it): a pause that returned
    -- before this commit is seen; one committing meanwhile waits for this transaction;
    -- one not yet committed holds it, and the job is left to the usual claim (0037).
    v_gate := pg_try_advisory_xact_lock_shared(1635213682, hashtext(NEW.queue))
        AND current_setting('transaction_isolation') = 'read committed';
    IF v_gate AND NEW.expires_at > v_now
        AND NOT EXISTS (SELECT 1 FROM awa.queue_meta AS m WHERE m.queue = NEW.queue AND m.paused)
        AND NOT EXISTS (SELECT 1 FROM awa.queue_limits AS l WHERE l.queue = NEW.queue)
        AND NOT EXISTS (SELECT 1 FROM awa.fleet_pool_members AS p WHERE p.queue = NEW.queue)
    THEN
        UPDATE awa.jobs AS j
        SET state = 'running', attempt = j.attempt + 1, run_lease = j.run_lease + 1,
            attempted_at = v_now, heartbeat_at = v_now,
            deadline_at = CASE WHEN NEW.deadline_ms > 0
                THEN v_now + NEW.deadline_ms * interval '1 millisecond' END
        WHERE j.id = NEW.job_id AND j.state = 'available' AND j.queue = NEW.queue
          AND j.ordering_key IS NULL AND j.partition_key IS NULL
          -- A notice carries at most 8000 bytes: a larger job is claimed the usual way.
          AND octet_length(j.args::text) + octet_length(j.metadata::text)
              + octet_length(j.tags::text) + octet_length(j.kind) < 6000
        RETURNING j.id, j.kind, j.queue, j.args, j.state, j.priority, j.attempt,
            j.max_attempts, j.run_lease, j.tags, j.metadata, j.progress, j.errors,
            j.created_at, j.run_at, j.attempted_at, j.deadline_at
        INTO v_job;
        IF FOUND THEN
            PERFORM pg_notify(NEW.channel,
                json_build_object('seat', NEW.seat_id, 'job', row_to_json(v_job))::text);
            RETURN NULL;
        END IF;
    END IF;
    PERFORM pg_notify(NEW.channel, json_build_object('seat', NEW.seat_id)::text);
    PERFORM pg_notify('awa_available', NEW.queue);
    RETURN NULL;
END
$$;
