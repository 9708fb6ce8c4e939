-- 0015: a job inserted while a worker waits idle for its queue is claimed as its insert
-- commits, and handed to that worker in the commit's own notice (ADR 0045).
-- Forward-only: never edit a shipped migration; add the next number instead.
--
-- A job's pickup used to be: the insert commits, its awa_available notice wakes the
-- worker, the worker claims (a round trip), the handler starts. At a trickle that claim's
-- round trip is most of the latency (docs/benchmarks.md, W2): both processes and the
-- claiming backend sleep between jobs, and each wake-up on a small VM is slow. Here the
-- claim is made before the notice leaves, in the inserting transaction.
--
-- Permit before claim still holds: an idle worker parks some of a queue's free permits
-- as *seats*, one row each, before any job can be claimed for them. A single insert
-- (job_insert.sql) of a job available now, with neither ordering key nor partition key,
-- takes one free seat of its queue (SKIP LOCKED: concurrent producers take different
-- seats, or none, and never wait) and writes the job's id into it. At commit a deferred
-- constraint trigger deletes the seat and, unless the queue is paused (behind the pause
-- gate of 0014), fleet-coordinated, or the seat expired, claims the job exactly as a
-- claim does (attempt and run_lease + 1, fenced by (run_lease, attempted_at)) with the
-- clock at commit, so a long transaction leaves no stale heartbeat. The seat's owner is
-- told on its own channel: the claimed job's row, or that the seat is gone (its permit
-- comes back). Whatever is not handed over is announced on awa_available, as before.
-- A rolled-back insert leaves the seat as it was.
--
-- Unlogged: seats are a worker's transient state; a server crash empties the table and
-- the worker's next resync (after its LISTEN reconnects) gives the permits back.

CREATE UNLOGGED TABLE awa.handoff_seats (
    seat_id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue       text NOT NULL,
    channel     text NOT NULL,            -- the owning worker's notice channel
    deadline_ms bigint NOT NULL DEFAULT 0,
    expires_at  timestamptz NOT NULL,     -- renewed by the owner; a dead owner's lapse
    job_id      bigint                    -- the job whose insert took the seat
);

CREATE INDEX handoff_seats_free_idx ON awa.handoff_seats (queue) WHERE job_id IS NULL;
CREATE INDEX handoff_seats_channel_idx ON awa.handoff_seats (channel);

-- A single insert's part: take one free seat of p_queue for job p_job, or none (SKIP
-- LOCKED: a producer never waits for another's seat). True when one was taken; the
-- claim happens at commit (below). SECURITY DEFINER so a producer-only role needs no
-- more than SELECT on the seats (docs/security.md).
CREATE FUNCTION awa.take_seat(p_queue text, p_job bigint) RETURNS boolean LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    UPDATE awa.handoff_seats AS s SET job_id = p_job
    WHERE s.seat_id = (
        SELECT t.seat_id FROM awa.handoff_seats AS t
        WHERE t.queue = p_queue AND t.job_id IS NULL AND t.expires_at > now()
        LIMIT 1
        FOR UPDATE SKIP LOCKED);
    RETURN FOUND;
END
$$;

-- SECURITY DEFINER: the trigger fires in the producer's transaction, and a producer-only
-- role may neither update awa.jobs nor read awa.queue_meta (docs/security.md).
CREATE FUNCTION awa.handoff_at_commit() RETURNS trigger LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_job record;
BEGIN
    DELETE FROM awa.handoff_seats WHERE seat_id = NEW.seat_id;
    -- The pause gate, as every claim takes it (0014): a pause that returned before this
    -- commit is seen; one committing meanwhile waits for this transaction.
    PERFORM pg_advisory_xact_lock_shared(1635213682, hashtext(NEW.queue));
    IF NEW.expires_at > v_now
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

CREATE CONSTRAINT TRIGGER handoff_seats_taken
    AFTER UPDATE OF job_id ON awa.handoff_seats
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (NEW.job_id IS NOT NULL AND OLD.job_id IS NULL)
    EXECUTE FUNCTION awa.handoff_at_commit();
