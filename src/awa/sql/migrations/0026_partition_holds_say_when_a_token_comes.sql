-- 0026: a partitioned queue's claim held back by a key's rate bucket says so, and when
-- the soonest token of such a key comes. Forward-only: the function's body is 0017's with
-- that one step added (a replaced function is restated whole).
--
-- A partitioned queue with a rate limit reported no hold when a key's bucket, not the
-- work, ended its claim (its room was > 0 before the claim), and 'partition' with no time
-- when a key's room was 0: either way the worker looked again only at its next poll, and
-- with rate 100/s and burst 1 a key ran about 5 jobs a second at 200 ms polls (a reviewer
-- measured 9.4/s per key). After the claim, the keys with waiting jobs and less than a
-- whole token now report the hold ('partition') with the soonest time a token comes, as a
-- negative retry_in_ms (see below). The worker looks again then, or at its next poll if
-- sooner; keys held by their cap are woken by the `freed` notice as before, and a new
-- key's job by its insert.

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
        UPDATE awa.fleet_pool_members AS m SET asked_at = v_now
        WHERE m.queue = p_queue AND (m.asked_at IS NULL OR m.asked_at < v_now - interval '1 second');
    END IF;
    IF v_why IS NOT NULL AND v_claimed < p_limit THEN  -- the OUT job columns are NULL
        blocked := v_why;
        retry_in_ms := v_wait_ms;
        RETURN NEXT;
    END IF;
END
$function$;
