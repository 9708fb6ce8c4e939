-- 0030: a claim's demand signal never waits for a row lock.
-- Forward-only: never edit a shipped migration; add the next number instead.
--
-- A claim of a fleet pool member records that its queue asks for room (asked_at, at most
-- once a second). The claims that run without the pool's lock (a completion's swap, a
-- member at its share: 0009, 0013) wrote it before taking any lock, those under it after
-- the pool's lock: one order for one transaction, the other for the next. A completion
-- whose riding claims named two members could so hold one member's row while it waited
-- for the pool's lock, held by a claim (or set_fleet_pool) waiting for that row:
-- deadlock detection ended one after a second (a review's repro; ADR 0050). The signal is
-- a hint, so a claim now skips it when another transaction holds the row
-- (awa.pool_asked: SKIP LOCKED) instead of waiting; that transaction is writing the
-- same signal or changing the pool. claim_coordinated_locked (0026) and claim_coordinated
-- (0016) are restated with that one change.

CREATE OR REPLACE FUNCTION awa.pool_asked(p_queue text, p_now timestamptz)
RETURNS void LANGUAGE sql VOLATILE AS $$
    UPDATE awa.fleet_pool_members AS m SET asked_at = p_now
    WHERE m.queue = (
        SELECT s.queue FROM awa.fleet_pool_members AS s
        WHERE s.queue = p_queue
          AND (s.asked_at IS NULL OR s.asked_at < p_now - interval '1 second')
        FOR UPDATE SKIP LOCKED)
$$;

CREATE OR REPLACE FUNCTION awa.claim_coordinated_locked(p_queue text, p_limit integer, p_deadline_ms bigint, p_synchronous_commit text)
 RETURNS TABLE(id bigint, kind text, queue text, args jsonb, state awa.job_state, priority smallint, attempt integer, max_attempts integer, run_lease bigint, tags text[], metadata jsonb, progress jsonb, errors jsonb, created_at timestamp with time zone, run_at timestamp with time zone, attempted_at timestamp with time zone, deadline_at timestamp with time zone, finalized_at timestamp with time zone, ordering_key text, blocked text, retry_in_ms double precision)
 LANGUAGE plpgsql
AS $function$
#variable_conflict use_column
DECLARE
    lim       awa.queue_limits;
    in_pool   boolean;
    v_now     timestamptz;
    v_grant   integer := p_limit;
    v_why     text;
    v_wait_ms double precision;
    v_room    integer;
    v_burst   integer;
    v_tokens  double precision;
    v_keys    text[];
    v_rooms   integer[];
    v_claimed integer := 0;
    v_heads   bigint[] := '{}';
    v_cand    bigint[];
BEGIN
    PERFORM set_config('synchronous_commit', p_synchronous_commit, true);
    IF p_limit < 1 OR EXISTS (
        SELECT 1 FROM awa.queue_meta AS m WHERE m.queue = p_queue AND m.paused
    ) THEN
        RETURN;
    END IF;
    in_pool := EXISTS (SELECT 1 FROM awa.fleet_pool_members AS m WHERE m.queue = p_queue);
    IF in_pool THEN
        PERFORM pg_advisory_xact_lock(1635213680, 0);
    END IF;
    PERFORM pg_advisory_xact_lock(1635213681, hashtext(p_queue));
    v_now := clock_timestamp();
    SELECT * INTO lim FROM awa.queue_limits AS l WHERE l.queue = p_queue;

    IF in_pool THEN
        v_room := awa.pool_room(p_queue, v_now);
        IF v_room IS NULL THEN  -- left the pool meanwhile: not worth a second lock order
            blocked := 'pool';
            RETURN NEXT;
            RETURN;
        END IF;
        IF v_room < v_grant THEN
            v_grant := greatest(v_room, 0);
            v_why := 'pool';
        END IF;
    END IF;

    IF lim.partition_by IS NOT NULL THEN
        -- Adopt jobs that became available since the last claim (bounded per claim).
        UPDATE awa.jobs AS j
        SET partition_key = left(coalesce(j.args ->> lim.partition_by, ''), 200)
        WHERE j.id = ANY (ARRAY(
            SELECT a.id FROM awa.jobs AS a
            WHERE a.queue = p_queue AND a.state = 'available' AND a.partition_key IS NULL
              AND a.ordering_key IS NULL
            ORDER BY a.priority, a.run_at, a.id
            LIMIT 10000
            FOR UPDATE SKIP LOCKED
        ) || ARRAY(
            SELECT a.id FROM awa.jobs AS a
            WHERE a.queue = p_queue AND a.state = 'available' AND a.partition_key IS NULL
              AND a.ordering_key IS NOT NULL
            ORDER BY a.ordering_key, a.id
            LIMIT 10000
            FOR UPDATE SKIP LOCKED
        ));
        -- Room per key with waiting jobs: distinct keys by a loose index scan, so a key
        -- with a long backlog costs one probe, not one row per job.
        WITH RECURSIVE keys(k) AS (
            (SELECT a.partition_key FROM awa.jobs AS a
             WHERE a.queue = p_queue AND a.state = 'available' AND a.partition_key IS NOT NULL
             ORDER BY a.partition_key LIMIT 1)
            UNION ALL
            SELECT (SELECT a.partition_key FROM awa.jobs AS a
                    WHERE a.queue = p_queue AND a.state = 'available'
                      AND a.partition_key > keys.k
                    ORDER BY a.partition_key LIMIT 1)
            FROM keys WHERE keys.k IS NOT NULL
        ), running AS (
            SELECT r.partition_key AS k, count(*)::integer AS n
            FROM awa.jobs AS r
            WHERE r.queue = p_queue AND r.state = 'running'
            GROUP BY r.partition_key
        )
        SELECT array_agg(keys.k), array_agg(least(
                coalesce(lim.concurrency - coalesce(running.n, 0), v_grant),
                coalesce(floor(least(
                    coalesce(lim.burst, ceil(lim.rate_limit)::integer),
                    b.tokens + lim.rate_limit * extract(epoch FROM v_now - b.refilled_at)
                ))::integer, coalesce(lim.burst, ceil(lim.rate_limit)::integer), v_grant)))
        INTO v_keys, v_rooms
        FROM keys
        LEFT JOIN running ON running.k = keys.k
        LEFT JOIN awa.queue_rate_buckets AS b
            ON b.queue = p_queue AND b.partition_key = keys.k
        WHERE keys.k IS NOT NULL;

        IF v_grant > 0 AND v_keys IS NOT NULL THEN
            -- An adopted ordered job is a candidate only at its key's turn; its key is
            -- locked before the claim below takes its snapshot (ADR 0034).
            WITH room AS (
                SELECT r.k, r.n FROM unnest(v_keys, v_rooms) AS r(k, n) WHERE r.n > 0
            ), candidates AS (
                SELECT c.id, c.priority, c.run_at, c.ordering_key
                FROM room, LATERAL (
                    SELECT a.id, a.priority, a.run_at, a.ordering_key FROM awa.jobs AS a
                    WHERE a.queue = p_queue AND a.state = 'available' AND a.partition_key = room.k
                      AND (a.ordering_key IS NULL OR awa.ordering_ready(a.ordering_key, a.id))
                    ORDER BY a.priority, a.run_at, a.id
                    LIMIT room.n
                ) AS c
            ), chosen AS (
                SELECT c.id, c.ordering_key FROM candidates AS c
                ORDER BY c.priority, c.run_at, c.id LIMIT v_grant
            )
            SELECT coalesce(array_agg(f.id), '{}') INTO v_cand FROM chosen AS f
            WHERE f.ordering_key IS NULL
               OR pg_try_advisory_xact_lock(1635213679, hashtext(f.ordering_key));

            RETURN QUERY
            WITH picked AS (
                SELECT a.id FROM awa.jobs AS a
                WHERE a.id = ANY (v_cand) AND a.state = 'available'
                  AND (a.ordering_key IS NULL OR awa.ordering_ready(a.ordering_key, a.id))
                FOR UPDATE SKIP LOCKED
            ), claimed AS (
                UPDATE awa.jobs AS j
                SET state = 'running', attempt = j.attempt + 1, run_lease = j.run_lease + 1,
                    attempted_at = v_now, heartbeat_at = v_now,
                    deadline_at = CASE WHEN p_deadline_ms > 0
                        THEN v_now + p_deadline_ms * interval '1 millisecond' END
                FROM picked WHERE j.id = picked.id
                RETURNING j.*
            ), spent AS (
                INSERT INTO awa.queue_rate_buckets AS b (queue, partition_key, tokens, refilled_at)
                SELECT p_queue, c.partition_key,
                    coalesce(lim.burst, ceil(lim.rate_limit)::integer) - count(*), v_now
                FROM claimed AS c
                WHERE lim.rate_limit IS NOT NULL
                GROUP BY c.partition_key
                ON CONFLICT (queue, partition_key) DO UPDATE
                -- refill to now, then spend n = burst − EXCLUDED.tokens
                SET tokens = least(coalesce(lim.burst, ceil(lim.rate_limit)::integer),
                        b.tokens + lim.rate_limit * extract(epoch FROM v_now - b.refilled_at))
                    - (coalesce(lim.burst, ceil(lim.rate_limit)::integer) - EXCLUDED.tokens),
                    refilled_at = v_now
            )
            SELECT c.id, c.kind::text, c.queue::text, c.args, c.state, c.priority::smallint,
                c.attempt::integer, c.max_attempts::integer, c.run_lease, c.tags::text[],
                nullif(c.metadata, '{}'::jsonb), c.progress, nullif(c.errors, '[]'::jsonb),
                c.created_at, c.run_at, c.attempted_at, c.deadline_at, c.finalized_at,
                c.ordering_key::text, NULL::text, NULL::float8
            FROM claimed AS c;
            GET DIAGNOSTICS v_claimed = ROW_COUNT;
        END IF;
        IF v_claimed < v_grant THEN  -- fewer jobs than the pool's room: it did not bind
            v_why := NULL;
        END IF;
        IF v_claimed < p_limit AND v_why IS NULL AND 0 >= ANY (v_rooms) THEN
            v_why := 'partition';
        END IF;
        -- 0026: a key with waiting jobs and less than a token left holds the claim too;
        -- the hold says when the soonest such token comes.
        IF lim.rate_limit IS NOT NULL AND v_claimed < p_limit AND v_keys IS NOT NULL
           AND v_why IS DISTINCT FROM 'pool' THEN
            SELECT min((1 - t.tokens) / lim.rate_limit * 1000) INTO v_wait_ms
            FROM awa.queue_rate_buckets AS b
            CROSS JOIN LATERAL (
                SELECT least(coalesce(lim.burst, ceil(lim.rate_limit)::integer),
                    b.tokens + lim.rate_limit * extract(epoch FROM v_now - b.refilled_at))
                    AS tokens
            ) AS t
            WHERE b.queue = p_queue AND b.partition_key = ANY (v_keys) AND t.tokens < 1
              AND EXISTS (
                  SELECT 1 FROM awa.jobs AS a
                  WHERE a.queue = p_queue AND a.state = 'available'
                    AND a.partition_key = b.partition_key);
            IF v_wait_ms IS NOT NULL THEN
                v_why := 'partition';
                -- Negative: "look again then", not "wait until then". A worker of an
                -- earlier release reads any retry_in_ms as a rate hold's wait and would
                -- claim no key of the queue before it; a negative one is already over
                -- for it, so it polls as before (a rolling upgrade's mixed fleet).
                v_wait_ms := -v_wait_ms;
            END IF;
        END IF;
    ELSE
        IF lim.concurrency IS NOT NULL THEN
            SELECT lim.concurrency - count(*) INTO v_room
            FROM awa.jobs AS r WHERE r.queue = p_queue AND r.state = 'running';
            IF v_room < v_grant THEN
                v_grant := greatest(v_room, 0);
                v_why := 'concurrency';
            END IF;
        END IF;
        IF lim.rate_limit IS NOT NULL THEN
            v_burst := coalesce(lim.burst, ceil(lim.rate_limit)::integer);
            SELECT least(v_burst, b.tokens + lim.rate_limit * extract(epoch FROM v_now - b.refilled_at))
            INTO v_tokens
            FROM awa.queue_rate_buckets AS b WHERE b.queue = p_queue AND b.partition_key = '';
            v_tokens := coalesce(v_tokens, v_burst);
            IF floor(v_tokens) < v_grant THEN
                v_grant := greatest(floor(v_tokens)::integer, 0);
                v_why := 'rate';
                v_wait_ms := (1 - (v_tokens - floor(v_tokens))) / lim.rate_limit * 1000;
            END IF;
        END IF;
        IF v_grant > 0 AND EXISTS (
            SELECT 1 FROM awa.jobs AS o
            WHERE o.queue = p_queue AND o.state = 'available' AND o.partition_key IS NULL
              AND o.ordering_key IS NOT NULL
        ) THEN
            v_heads := awa.ordering_pick(p_queue, v_grant);
        END IF;
        IF v_grant > 0 THEN
            RETURN QUERY
            WITH picked AS (
                SELECT unnest(ARRAY(
                    SELECT a.id FROM awa.jobs AS a
                    WHERE a.queue = p_queue AND a.state = 'available'
                      AND a.partition_key IS NULL AND a.ordering_key IS NULL
                    ORDER BY a.priority, a.run_at, a.id
                    LIMIT v_grant - cardinality(v_heads)
                    FOR UPDATE SKIP LOCKED
                ) || ARRAY(
                    SELECT a.id FROM awa.jobs AS a
                    WHERE a.id = ANY (v_heads) AND a.state = 'available'
                      AND awa.ordering_ready(a.ordering_key, a.id)
                    FOR UPDATE SKIP LOCKED
                )) AS id
            ), claimed AS (
                UPDATE awa.jobs AS j
                SET state = 'running', attempt = j.attempt + 1, run_lease = j.run_lease + 1,
                    attempted_at = v_now, heartbeat_at = v_now,
                    deadline_at = CASE WHEN p_deadline_ms > 0
                        THEN v_now + p_deadline_ms * interval '1 millisecond' END
                FROM picked WHERE j.id = picked.id
                RETURNING j.*
            )
            SELECT c.id, c.kind::text, c.queue::text, c.args, c.state, c.priority::smallint,
                c.attempt::integer, c.max_attempts::integer, c.run_lease, c.tags::text[],
                nullif(c.metadata, '{}'::jsonb), c.progress, nullif(c.errors, '[]'::jsonb),
                c.created_at, c.run_at, c.attempted_at, c.deadline_at, c.finalized_at,
                c.ordering_key::text, NULL::text, NULL::float8
            FROM claimed AS c;
            GET DIAGNOSTICS v_claimed = ROW_COUNT;
        END IF;
        IF lim.rate_limit IS NOT NULL AND v_claimed > 0 THEN
            INSERT INTO awa.queue_rate_buckets AS b (queue, partition_key, tokens, refilled_at)
            VALUES (p_queue, '', v_tokens - v_claimed, v_now)
            ON CONFLICT (queue, partition_key) DO UPDATE
            SET tokens = EXCLUDED.tokens, refilled_at = EXCLUDED.refilled_at;
        END IF;
        IF v_claimed < v_grant THEN  -- the queue ran dry first: no limit bound this claim
            v_why := NULL;
            v_wait_ms := NULL;
        END IF;
    END IF;

    IF in_pool THEN  -- demand signal, written at most once a second
        PERFORM awa.pool_asked(p_queue, v_now);
    END IF;
    IF v_why IS NOT NULL AND v_claimed < p_limit THEN  -- the OUT job columns are NULL
        blocked := v_why;
        retry_in_ms := v_wait_ms;
        RETURN NEXT;
    END IF;
END
$function$;

CREATE OR REPLACE FUNCTION awa.claim_coordinated(p_queue text, p_limit integer, p_deadline_ms bigint, p_synchronous_commit text, p_instance text DEFAULT NULL::text, p_held integer DEFAULT NULL::integer, p_freed integer DEFAULT 0, p_ordered boolean DEFAULT true)
 RETURNS TABLE(id bigint, kind text, queue text, args jsonb, state awa.job_state, priority smallint, attempt integer, max_attempts integer, run_lease bigint, tags text[], metadata jsonb, progress jsonb, errors jsonb, created_at timestamp with time zone, run_at timestamp with time zone, attempted_at timestamp with time zone, deadline_at timestamp with time zone, finalized_at timestamp with time zone, ordering_key text, blocked text, retry_in_ms double precision)
 LANGUAGE plpgsql
AS $function$
#variable_conflict use_column
DECLARE
    v_now     timestamptz := clock_timestamp();
    v_room    integer;
    v_limit   integer;
    v_lim     awa.queue_limits;
    v_member  boolean;
    v_running integer;
    v_swap    integer;
    v_swapped integer := 0;
    v_part    integer;  -- this process's part of the member's share, less what it holds
    v_counted boolean := false;  -- the swap's reads were made
BEGIN
    SELECT * INTO v_lim FROM awa.queue_limits AS l WHERE l.queue = p_queue;
    v_member := EXISTS (SELECT 1 FROM awa.fleet_pool_members AS m WHERE m.queue = p_queue);
    -- A paused queue (or a claim of nothing) is the locked claim's to answer: no rows.
    IF p_limit < 1 OR EXISTS (
        SELECT 1 FROM awa.queue_meta AS m WHERE m.queue = p_queue AND m.paused
    ) THEN
        PERFORM awa.announce_freed(p_queue, v_lim.concurrency IS NOT NULL, v_member)
        WHERE p_freed > 0;
        RETURN QUERY SELECT * FROM awa.claim_coordinated_locked(
            p_queue, p_limit, p_deadline_ms, p_synchronous_commit);
        RETURN;
    END IF;

    -- The swap: no more jobs than this transaction finished of the queue, cut to the cap
    -- (a count that sees those completions), the member's room and this process's part.
    -- The same reads then answer what the swap leaves, as the unlocked reads below would.
    -- Not while ordered jobs wait (``p_ordered``, awa.claim's probe; unknown counts as
    -- waiting): they start only through the locked claim's key locks.
    IF p_freed > 0 AND NOT p_ordered AND v_lim.partition_by IS NULL
       AND v_lim.rate_limit IS NULL
    THEN
        v_counted := true;
        v_swap := least(p_limit, p_freed);
        IF v_lim.concurrency IS NOT NULL OR v_member THEN
            SELECT count(*)::integer INTO v_running
            FROM awa.jobs AS r WHERE r.queue = p_queue AND r.state = 'running';
        END IF;
        IF v_lim.concurrency IS NOT NULL THEN
            v_swap := least(v_swap, v_lim.concurrency - v_running);
        END IF;
        IF v_member THEN
            v_room := coalesce(awa.pool_room(p_queue, v_now), 0);
            v_part := v_room;
            IF v_room > 0 AND p_instance IS NOT NULL THEN
                v_part := awa.pool_process_part(p_queue, p_instance, v_room + v_running)
                    - coalesce(p_held, 0);
            END IF;
            v_swap := least(v_swap, v_room, v_part);
            -- The demand signal the locked claim would have written.
            PERFORM awa.pool_asked(p_queue, v_now);
        END IF;
        IF v_swap > 0 THEN
            -- The plain claim (awa.claim's), without the fleet's locks.
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
                LIMIT v_swap
                FOR UPDATE SKIP LOCKED
            ))
            RETURNING j.id, j.kind::text, j.queue::text, j.args, j.state, j.priority::smallint,
                j.attempt::integer, j.max_attempts::integer, j.run_lease, j.tags::text[],
                nullif(j.metadata, '{}'::jsonb), j.progress, nullif(j.errors, '[]'::jsonb),
                j.created_at, j.run_at, j.attempted_at, j.deadline_at, j.finalized_at,
                j.ordering_key::text, NULL::text, NULL::float8;
            GET DIAGNOSTICS v_swapped = ROW_COUNT;
        END IF;
    END IF;
    -- Slots freed and not re-filled here are announced, so held-back claimers try them.
    PERFORM awa.announce_freed(p_queue, v_lim.concurrency IS NOT NULL, v_member)
    WHERE p_freed > v_swapped;
    IF v_swapped > 0 THEN
        -- All of it, or the queue ran dry (rows other claimers hold are theirs).
        IF v_swapped >= p_limit OR v_swapped < v_swap THEN
            RETURN;
        END IF;
        p_limit := p_limit - v_swapped;
        p_held := coalesce(p_held, 0) + v_swapped;
    END IF;
    IF v_counted THEN
        -- What is left, from the swap's reads: the cap reached, no room in the pool, this
        -- process at its part, or the room there is (claimed under the locks below).
        IF v_lim.concurrency IS NOT NULL AND v_running + v_swapped >= v_lim.concurrency THEN
            blocked := 'concurrency';
            RETURN NEXT;
            RETURN;
        END IF;
        IF v_member AND least(v_room, v_part) - v_swapped <= 0 THEN
            blocked := CASE WHEN v_room - v_swapped > 0 THEN 'pool_part' ELSE 'pool' END;
            RETURN NEXT;
            RETURN;
        END IF;
    END IF;

    -- A queue at its fleet-wide cap is told so without queueing for the queue's lock, as
    -- the pool is below: read without the lock, "full" can only be out of date by a
    -- completion committed since, whose own freed notice wakes the claimer again.
    IF v_lim.concurrency IS NOT NULL AND v_lim.partition_by IS NULL AND NOT v_counted AND (
        SELECT count(*) FROM awa.jobs AS r WHERE r.queue = p_queue AND r.state = 'running'
    ) >= v_lim.concurrency THEN
        blocked := 'concurrency';
        RETURN NEXT;
        RETURN;
    END IF;
    v_limit := p_limit;
    IF v_member AND v_counted THEN
        v_limit := least(p_limit, v_part - v_swapped);
    ELSIF v_member THEN
        v_room := awa.pool_room(p_queue, v_now);
        IF v_room > 0 AND p_instance IS NOT NULL THEN
            v_limit := least(p_limit, awa.pool_process_part(p_queue, p_instance, v_room + (
                SELECT count(*)::integer FROM awa.jobs AS r
                WHERE r.queue = p_queue AND r.state = 'running')) - coalesce(p_held, 0));
        END IF;
        IF v_room <= 0 OR v_limit <= 0 THEN
            -- The demand signal, as the locked claim writes it: others' shares shrink for it.
            PERFORM awa.pool_asked(p_queue, v_now);
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
$function$;
