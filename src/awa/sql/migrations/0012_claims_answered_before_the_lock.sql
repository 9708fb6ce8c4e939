-- 0012: a coordinated claim that can only learn "no" is answered before any lock
-- (ADRs 0038 and 0039). Forward-only: never edit a shipped migration; add the next
-- number instead.
--
-- Every completion under a fleet cap or in the fleet pool sends a ``freed`` notice, and
-- the dispatchers held back by it, in every process, claimed on it. Most could only
-- learn "no": the process that freed the slot re-filled it in the same statement, by
-- the claim riding on its completion (ADR 0012). Two answers change:
-- * a queue at its fleet-wide cap (no ``partition_by``) is told ``concurrency`` from an
--   unlocked count, without queueing for the queue's lock (ADR 0039), as 0009 does for
--   a pool member with no room; a cap per key is still decided under the lock;
-- * a pool member whose process already runs its part of the member's share (ADR 0037)
--   is told ``pool_part`` instead of ``pool``: a slot another process frees cannot
--   raise that part, so its dispatcher need not wake for ``freed`` notices (ADR 0038).
-- A paused queue still gets no rows. Only claim_coordinated changes (0011's body plus
-- the two answers).

CREATE OR REPLACE FUNCTION awa.claim_coordinated(
    p_queue text, p_limit integer, p_deadline_ms bigint, p_synchronous_commit text,
    p_instance text DEFAULT NULL, p_held integer DEFAULT NULL
) RETURNS TABLE (
    id bigint, kind text, queue text, args jsonb, state awa.job_state, priority smallint,
    attempt integer, max_attempts integer, run_lease bigint, tags text[], metadata jsonb,
    progress jsonb, errors jsonb, created_at timestamptz, run_at timestamptz,
    attempted_at timestamptz, deadline_at timestamptz, finalized_at timestamptz,
    ordering_key text, blocked text, retry_in_ms double precision
) LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
    v_now   timestamptz := clock_timestamp();
    v_room  integer;
    v_limit integer := p_limit;
    v_cap   integer;
BEGIN
    -- A paused queue (or a claim of nothing) is the locked claim's to answer: no rows.
    IF p_limit < 1 OR EXISTS (
        SELECT 1 FROM awa.queue_meta AS m WHERE m.queue = p_queue AND m.paused
    ) THEN
        RETURN QUERY SELECT * FROM awa.claim_coordinated_locked(
            p_queue, p_limit, p_deadline_ms, p_synchronous_commit);
        RETURN;
    END IF;
    -- A queue at its fleet-wide cap is told so without queueing for the queue's lock, as
    -- the pool is below: read without the lock, "full" can only be out of date by a
    -- completion committed since, whose own freed notice wakes the claimer again.
    SELECT l.concurrency INTO v_cap FROM awa.queue_limits AS l
    WHERE l.queue = p_queue AND l.partition_by IS NULL;
    IF v_cap IS NOT NULL AND (
        SELECT count(*) FROM awa.jobs AS r WHERE r.queue = p_queue AND r.state = 'running'
    ) >= v_cap THEN
        blocked := 'concurrency';
        RETURN NEXT;
        RETURN;
    END IF;
    IF EXISTS (SELECT 1 FROM awa.fleet_pool_members AS m WHERE m.queue = p_queue) THEN
        v_room := awa.pool_room(p_queue, v_now);
        IF v_room > 0 AND p_instance IS NOT NULL THEN
            v_limit := least(p_limit, awa.pool_process_part(p_queue, p_instance, v_room + (
                SELECT count(*)::integer FROM awa.jobs AS r
                WHERE r.queue = p_queue AND r.state = 'running')) - coalesce(p_held, 0));
        END IF;
        IF v_room <= 0 OR v_limit <= 0 THEN
            -- The demand signal, as the locked claim writes it: others' shares shrink for it.
            UPDATE awa.fleet_pool_members AS m SET asked_at = v_now
            WHERE m.queue = p_queue
              AND (m.asked_at IS NULL OR m.asked_at < v_now - interval '1 second');
            blocked := CASE WHEN v_room > 0 THEN 'pool_part' ELSE 'pool' END;
            RETURN NEXT;
            RETURN;
        END IF;
    END IF;
    IF v_limit < p_limit THEN
        -- Cut to this process's part: a claim that got all of it ends with a pool hold.
        RETURN QUERY
        WITH k AS (
            SELECT * FROM awa.claim_coordinated_locked(
                p_queue, v_limit, p_deadline_ms, p_synchronous_commit)
        )
        SELECT * FROM k
        UNION ALL
        SELECT NULL::bigint, NULL::text, NULL::text, NULL::jsonb, NULL::awa.job_state,
            NULL::smallint, NULL::integer, NULL::integer, NULL::bigint, NULL::text[],
            NULL::jsonb, NULL::jsonb, NULL::jsonb, NULL::timestamptz, NULL::timestamptz,
            NULL::timestamptz, NULL::timestamptz, NULL::timestamptz, NULL::text,
            'pool_part'::text, NULL::float8
        WHERE (SELECT count(*) FROM k WHERE k.id IS NOT NULL) >= v_limit;
        RETURN;
    END IF;
    RETURN QUERY SELECT * FROM awa.claim_coordinated_locked(
        p_queue, p_limit, p_deadline_ms, p_synchronous_commit);
END
$$;

