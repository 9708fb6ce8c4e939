-- 0014: a pause holds from the moment pause_queue returns (ADR 0042).
-- Forward-only: never edit a shipped migration; add the next number instead.
--
-- Since 0010 the claim decides its path (pause included) in one statement and claims in
-- the next. Under READ COMMITTED each statement of a VOLATILE function takes its own
-- snapshot, so a claim that read "not paused" just before a pause committed could then
-- claim a job inserted just after the pause: pause_queue had returned, the insert came
-- after it, and the job ran anyway (seen once in CI, through PgBouncer, where a round
-- trip is slow enough to fit in the gap). A guard inside every claiming statement would
-- close the gap per statement, but the claim has five of them across three functions.
--
-- Instead, a gate per queue: every claim takes a shared transaction-scoped advisory lock
-- on (1635213682, hashtext(queue)) before it decides, and a row of awa.queue_meta that
-- becomes paused takes the same lock exclusively, by trigger, so a pause written by hand
-- in SQL is gated too. The pause's commit therefore waits for every claim of the queue
-- already deciding (they are short: one statement or one completion's transaction), and
-- a claim arriving meanwhile waits for the pause's commit and then sees it. Shared locks
-- do not conflict with each other, so claims never wait for claims; the cost is one lock
-- manager entry per claim, released at commit. Resume needs no gate: a claim that misses
-- a resume only finds the jobs at its next poll or wake-up.

CREATE FUNCTION awa.pause_gate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(1635213682, hashtext(NEW.queue));
    RETURN NULL;
END
$$;

CREATE TRIGGER queue_meta_pause_gate_insert
    AFTER INSERT ON awa.queue_meta
    FOR EACH ROW WHEN (NEW.paused)
    EXECUTE FUNCTION awa.pause_gate();

CREATE TRIGGER queue_meta_pause_gate_update
    AFTER UPDATE OF paused ON awa.queue_meta
    FOR EACH ROW WHEN (NEW.paused AND NOT OLD.paused)
    EXECUTE FUNCTION awa.pause_gate();

-- The one claim (0013), with the gate taken first.
CREATE OR REPLACE FUNCTION awa.claim(
    p_queue text, p_limit integer, p_deadline_ms bigint, p_synchronous_commit text,
    p_instance text DEFAULT NULL, p_held integer DEFAULT NULL, p_freed integer DEFAULT 0
) RETURNS TABLE (
    id bigint, kind text, queue text, args jsonb, state awa.job_state, priority smallint,
    attempt integer, max_attempts integer, run_lease bigint, tags text[], metadata jsonb,
    progress jsonb, errors jsonb, created_at timestamptz, run_at timestamptz,
    attempted_at timestamptz, deadline_at timestamptz, finalized_at timestamptz,
    ordering_key text, blocked text, retry_in_ms double precision
) LANGUAGE plpgsql VOLATILE SET plan_cache_mode = force_generic_plan AS $$
#variable_conflict use_column
DECLARE
    v_coordinated boolean;
    v_paused      boolean;
    v_ordered     boolean;
    v_heads       bigint[];
BEGIN
    -- The pause gate first, in a statement of its own: a pause waits for this claim to
    -- commit, or this claim waits for the pause to commit, and then the decision below
    -- (a statement started after the wait) sees it.
    PERFORM pg_advisory_xact_lock_shared(1635213682, hashtext(p_queue));
    -- One statement decides the path (and sets the commit mode, which 0007 did in one of
    -- its own): fleet limits or pool membership, a pause, and ordered jobs waiting (a probe
    -- of jobs_ordered_claim_idx, empty for most queues). As guards inside the claim below
    -- they cost more: that statement was then planned afresh on every call.
    SELECT EXISTS (SELECT 1 FROM awa.queue_limits AS l WHERE l.queue = p_queue)
            OR EXISTS (SELECT 1 FROM awa.fleet_pool_members AS m WHERE m.queue = p_queue),
        EXISTS (SELECT 1 FROM awa.queue_meta AS m WHERE m.queue = p_queue AND m.paused),
        (SELECT o.id FROM awa.jobs AS o
         WHERE o.queue = p_queue AND o.state = 'available' AND o.partition_key IS NULL
           AND o.ordering_key IS NOT NULL
         ORDER BY o.priority, o.run_at, o.id LIMIT 1) IS NOT NULL
    INTO v_coordinated, v_paused, v_ordered
    FROM set_config('synchronous_commit', p_synchronous_commit, true);
    IF v_coordinated THEN
        RETURN QUERY SELECT * FROM awa.claim_coordinated(
            p_queue, p_limit, p_deadline_ms, p_synchronous_commit, p_instance, p_held,
            p_freed, v_ordered);
        RETURN;
    END IF;
    IF p_limit < 1 OR v_paused THEN
        RETURN;
    END IF;
    IF NOT v_ordered THEN
        -- The plain claim (job_claim_available.sql says why it has this shape): the next
        -- jobs in dispatch order on jobs_claim_idx, rows other claimers hold skipped, each
        -- claim a new attempt (attempt and run_lease + 1) fenced by (run_lease,
        -- attempted_at). Matched by id = ANY(array): an index lookup whatever the
        -- table's statistics.
        RETURN QUERY
        UPDATE awa.jobs AS j
        SET state = 'running', attempt = j.attempt + 1, run_lease = j.run_lease + 1,
            attempted_at = now(), heartbeat_at = now(),
            deadline_at = CASE WHEN p_deadline_ms > 0
                THEN now() + p_deadline_ms * interval '1 millisecond' END
        WHERE j.id = ANY (ARRAY(
            SELECT a.id FROM awa.jobs AS a
            WHERE a.state = 'available' AND a.queue = p_queue AND a.partition_key IS NULL
              AND a.ordering_key IS NULL
            ORDER BY a.priority, a.run_at, a.id
            LIMIT p_limit
            FOR UPDATE SKIP LOCKED
        ))
        RETURNING j.id, j.kind, j.queue, j.args, j.state, j.priority, j.attempt,
            j.max_attempts, j.run_lease, j.tags, nullif(j.metadata, '{}'::jsonb), j.progress,
            nullif(j.errors, '[]'::jsonb), j.created_at, j.run_at, j.attempted_at,
            j.deadline_at, j.finalized_at, j.ordering_key, NULL::text, NULL::float8;
        RETURN;
    END IF;
    -- Ordered jobs wait in this queue: the keys' turns that rank within the limit (their
    -- keys locked), then, in a statement whose snapshot follows those locks, the heads
    -- re-checked and plain jobs for the rest of the limit.
    v_heads := awa.ordering_pick(p_queue, p_limit);
    RETURN QUERY
    UPDATE awa.jobs AS j
    SET state = 'running', attempt = j.attempt + 1, run_lease = j.run_lease + 1,
        attempted_at = now(), heartbeat_at = now(),
        deadline_at = CASE WHEN p_deadline_ms > 0
            THEN now() + p_deadline_ms * interval '1 millisecond' END
    WHERE j.id = ANY (ARRAY(
        SELECT a.id FROM awa.jobs AS a
        WHERE a.state = 'available' AND a.queue = p_queue AND a.partition_key IS NULL
          AND a.ordering_key IS NULL
        ORDER BY a.priority, a.run_at, a.id
        LIMIT p_limit - cardinality(v_heads)
        FOR UPDATE SKIP LOCKED
    ) || ARRAY(
        SELECT a.id FROM awa.jobs AS a
        WHERE a.id = ANY (v_heads) AND a.state = 'available'
          AND awa.ordering_ready(a.ordering_key, a.id)
        FOR UPDATE SKIP LOCKED
    ))
    RETURNING j.id, j.kind, j.queue, j.args, j.state, j.priority, j.attempt,
        j.max_attempts, j.run_lease, j.tags, nullif(j.metadata, '{}'::jsonb), j.progress,
        nullif(j.errors, '[]'::jsonb), j.created_at, j.run_at, j.attempted_at,
        j.deadline_at, j.finalized_at, j.ordering_key, NULL::text, NULL::float8;
END
$$;
