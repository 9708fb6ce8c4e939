-- 0008: ordering keys (ADR 0034): jobs that share an ordering_key run one at a time, in
-- insertion order, whatever queue they are in and however many processes claim.
-- Forward-only: never edit a shipped migration; add the next number instead.

ALTER TABLE awa.jobs
    ADD COLUMN ordering_key text CHECK (char_length(ordering_key) BETWEEN 1 AND 255);
-- The DLQ keeps a job's key, so a job retried out of it takes its place in line again.
ALTER TABLE awa.dlq ADD COLUMN ordering_key text;

-- The DLQ trigger (0002) copies the key along.
CREATE OR REPLACE FUNCTION awa.move_failed_to_dlq() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM awa.queue_meta WHERE queue = NEW.queue AND dlq) THEN
        RETURN NULL;
    END IF;
    INSERT INTO awa.dlq (
        id, kind, queue, args, state, priority, original_priority, attempt, max_attempts,
        run_lease, tags, metadata, progress, errors, created_at, run_at, attempted_at,
        heartbeat_at, deadline_at, finalized_at, unique_key, unique_states, callback_id,
        callback_timeout_at, reason, dlq_at, ordering_key
    ) VALUES (
        NEW.id, NEW.kind, NEW.queue, NEW.args, NEW.state, NEW.priority,
        NEW.original_priority, NEW.attempt, NEW.max_attempts, NEW.run_lease, NEW.tags,
        NEW.metadata, NEW.progress, NEW.errors, NEW.created_at, NEW.run_at,
        NEW.attempted_at, NEW.heartbeat_at, NEW.deadline_at, NEW.finalized_at,
        NEW.unique_key, NEW.unique_states, NULL, NULL,
        coalesce(NEW.errors -> -1 ->> 'error', 'failed'), now(), NEW.ordering_key
    );
    DELETE FROM awa.jobs WHERE id = NEW.id;
    RETURN NULL;
END
$$;

-- Available jobs now split three ways: plain jobs in jobs_claim_idx; ordered jobs not
-- adopted by a partitioned queue in jobs_ordered_idx and jobs_ordered_claim_idx; adopted
-- ones (ordered or not) in jobs_partition_idx (0003). So the plain claim never scans a
-- backlog of ordered jobs that wait for their turn, and a query over available jobs
-- names the index it wants (partition_key and ordering_key IS NULL / IS NOT NULL).
DROP INDEX awa.jobs_claim_idx;
CREATE INDEX jobs_claim_idx ON awa.jobs (queue, priority, run_at, id)
    WHERE state = 'available' AND partition_key IS NULL AND ordering_key IS NULL;

-- Ordered available jobs of a queue, not adopted: by key for a loose scan that visits
-- each waiting key once (its lowest id in the queue is the only one that can be its
-- turn), so a key with a long backlog costs one probe per claim, not one per job…
CREATE INDEX jobs_ordered_idx ON awa.jobs (queue, ordering_key, id)
    WHERE state = 'available' AND partition_key IS NULL AND ordering_key IS NOT NULL;
-- The same jobs in dispatch order: with many keys, the first of them are mostly heads.
CREATE INDEX jobs_ordered_claim_idx ON awa.jobs (queue, priority, run_at, id)
    WHERE state = 'available' AND partition_key IS NULL AND ordering_key IS NOT NULL;

-- The unfinished jobs of a key in id order: the first one is the key's turn.
CREATE INDEX jobs_ordering_idx ON awa.jobs (ordering_key, id)
    WHERE ordering_key IS NOT NULL
      AND state IN ('scheduled', 'available', 'running', 'retryable', 'waiting_external');

-- Keys held by a started job (running, or parked for a callback): a lower id committed
-- after a higher one started must still wait for it.
CREATE INDEX jobs_ordering_held_idx ON awa.jobs (ordering_key)
    WHERE ordering_key IS NOT NULL AND state IN ('running', 'waiting_external');

-- True when job p_id may start now: no unfinished job of its key has a lower id, and no
-- job of its key has started. Read in the snapshot of the statement that calls it, which
-- every claim takes after the key's lock (awa.ordering_pick), so it sees every earlier
-- claim of the key committed.
CREATE FUNCTION awa.ordering_ready(p_key text, p_id bigint)
RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT NOT EXISTS (
        SELECT 1 FROM awa.jobs AS h
        WHERE h.ordering_key = p_key AND h.ordering_key IS NOT NULL
          AND h.state IN ('running', 'waiting_external')
    ) AND NOT EXISTS (
        SELECT 1 FROM awa.jobs AS e
        WHERE e.ordering_key = p_key AND e.ordering_key IS NOT NULL AND e.id < p_id
          AND e.state IN ('scheduled', 'available', 'running', 'retryable', 'waiting_external')
    )
$$;

-- Advisory lock class 1635213679 ('awao') + hashtext(ordering_key): held by the
-- transaction that claims a job of the key, until it commits. Taken with try (a key
-- another claimer holds is skipped, like a row under SKIP LOCKED), before the statement
-- that claims: in READ COMMITTED that statement's snapshot is taken after the lock, so it
-- sees the previous claim of the key committed (ADR 0034 gives the argument).

-- The ordered jobs p_queue should claim now, of at most p_limit claims: the keys' turns
-- (ready heads) that, merged with the first plain jobs in dispatch order (priority,
-- run_at, id), rank within the first p_limit; each one's key locked. Unlocked reads; the
-- claim that follows locks and re-checks the rows.
-- Heads are found in dispatch order on jobs_ordered_claim_idx, reading at most 200 rows:
-- with many keys the first rows are mostly heads. When those rows hold fewer heads than
-- wanted and there are more rows (a few keys with long backlogs behind started jobs), a
-- loose scan of jobs_ordered_idx visits each waiting key once instead — one probe per
-- key, however long its backlog.
CREATE FUNCTION awa.ordering_pick(p_queue text, p_limit integer)
RETURNS bigint[] LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_seen  integer;
    v_heads bigint[];
BEGIN
    -- Stops at the p_limit-th head: ordering_ready is asked in dispatch order only as far
    -- as needed.
    SELECT ARRAY(
        SELECT f.id FROM (
            SELECT a.id, a.ordering_key FROM awa.jobs AS a
            WHERE a.queue = p_queue AND a.state = 'available' AND a.partition_key IS NULL
              AND a.ordering_key IS NOT NULL
            ORDER BY a.priority, a.run_at, a.id
            LIMIT 200
        ) AS f
        WHERE awa.ordering_ready(f.ordering_key, f.id)
        LIMIT p_limit
    ) INTO v_heads;
    IF cardinality(v_heads) < p_limit THEN
        SELECT count(*) INTO v_seen FROM (
            SELECT 1 FROM awa.jobs AS a
            WHERE a.queue = p_queue AND a.state = 'available' AND a.partition_key IS NULL
              AND a.ordering_key IS NOT NULL
            LIMIT 200
        ) AS f;
    END IF;
    IF cardinality(v_heads) < p_limit AND v_seen = 200 THEN
        WITH RECURSIVE keys(k) AS (
            (SELECT a.ordering_key FROM awa.jobs AS a
             WHERE a.queue = p_queue AND a.state = 'available' AND a.partition_key IS NULL
               AND a.ordering_key IS NOT NULL
             ORDER BY a.ordering_key LIMIT 1)
            UNION ALL
            SELECT (SELECT a.ordering_key FROM awa.jobs AS a
                    WHERE a.queue = p_queue AND a.state = 'available'
                      AND a.partition_key IS NULL AND a.ordering_key IS NOT NULL
                      AND a.ordering_key > keys.k
                    ORDER BY a.ordering_key LIMIT 1)
            FROM keys WHERE keys.k IS NOT NULL
        )
        SELECT ARRAY(
            SELECT f.id
            FROM keys CROSS JOIN LATERAL (
                SELECT a.id, a.priority, a.run_at FROM awa.jobs AS a
                WHERE a.queue = p_queue AND a.state = 'available' AND a.partition_key IS NULL
                  AND a.ordering_key IS NOT NULL AND a.ordering_key = keys.k
                ORDER BY a.id LIMIT 1
            ) AS f
            WHERE keys.k IS NOT NULL AND awa.ordering_ready(keys.k, f.id)
            ORDER BY f.priority, f.run_at, f.id
            LIMIT p_limit
        ) INTO v_heads;
    END IF;
    IF cardinality(v_heads) = 0 THEN
        RETURN v_heads;
    END IF;
    -- Merge with the plain jobs; lock the keys of the heads that rank within the limit.
    RETURN ARRAY(
        SELECT m.id FROM (
            SELECT u.id, u.ordered FROM (
                SELECT h.id, h.priority, h.run_at, true AS ordered
                FROM awa.jobs AS h WHERE h.id = ANY (v_heads)
                UNION ALL
                (SELECT a.id, a.priority, a.run_at, false FROM awa.jobs AS a
                 WHERE a.queue = p_queue AND a.state = 'available'
                   AND a.partition_key IS NULL AND a.ordering_key IS NULL
                 ORDER BY a.priority, a.run_at, a.id LIMIT p_limit)
            ) AS u
            ORDER BY u.priority, u.run_at, u.id
            LIMIT p_limit
        ) AS m
        JOIN awa.jobs AS j ON j.id = m.id
        WHERE m.ordered AND pg_try_advisory_xact_lock(1635213679, hashtext(j.ordering_key))
    );
END
$$;

-- The one claim (0007), now without ordered jobs on jobs_claim_idx. A queue with ordered
-- jobs waiting takes the ordered path: awa.ordering_pick, then one statement that claims
-- the picked heads (re-checked in its own snapshot) and plain jobs for the rest of the
-- limit. Columns gain ordering_key, so the function is dropped and created again (with
-- complete_and_claim, which returns its rows, and claim_coordinated).
DROP FUNCTION awa.complete_and_claim(jsonb, text, jsonb);
DROP FUNCTION awa.claim(text, integer, bigint, text);
DROP FUNCTION awa.claim_coordinated(text, integer, bigint, text);

CREATE FUNCTION awa.claim(
    p_queue text, p_limit integer, p_deadline_ms bigint, p_synchronous_commit text
) RETURNS TABLE (
    id bigint, kind text, queue text, args jsonb, state awa.job_state, priority smallint,
    attempt integer, max_attempts integer, run_lease bigint, tags text[], metadata jsonb,
    progress jsonb, errors jsonb, created_at timestamptz, run_at timestamptz,
    attempted_at timestamptz, deadline_at timestamptz, finalized_at timestamptz,
    ordering_key text, blocked text, retry_in_ms double precision
) LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
    v_coordinated boolean;
    v_paused      boolean;
    v_ordered     boolean;
    v_heads       bigint[];
BEGIN
    -- One statement decides the path (and sets the commit mode, which 0007 did in one of
    -- its own): fleet limits or pool membership, a pause, and ordered jobs waiting (a probe
    -- of jobs_ordered_claim_idx, empty for most queues). As guards inside the claim below
    -- they cost more: that statement was then planned afresh on every call.
    SELECT EXISTS (SELECT 1 FROM awa.queue_limits AS l WHERE l.queue = p_queue)
            OR EXISTS (SELECT 1 FROM awa.fleet_pool_members AS m WHERE m.queue = p_queue),
        EXISTS (SELECT 1 FROM awa.queue_meta AS m WHERE m.queue = p_queue AND m.paused),
        EXISTS (SELECT 1 FROM awa.jobs AS o
                WHERE o.queue = p_queue AND o.state = 'available'
                  AND o.partition_key IS NULL AND o.ordering_key IS NOT NULL)
    INTO v_coordinated, v_paused, v_ordered
    FROM set_config('synchronous_commit', p_synchronous_commit, true);
    IF v_coordinated THEN
        RETURN QUERY SELECT * FROM awa.claim_coordinated(
            p_queue, p_limit, p_deadline_ms, p_synchronous_commit);
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

-- claim_coordinated (0003) for queues under fleet limits or in the fleet pool: ordered
-- jobs count against every cap like any other. Unadopted ordered jobs are picked by
-- awa.ordering_pick within the grant; in a partitioned queue they are adopted like the
-- rest and each is a candidate only at its key's turn (blocked ones in a partition's
-- backlog are read by the candidate scan: the cost of combining the two, ADR 0034).
CREATE FUNCTION awa.claim_coordinated(
    p_queue text, p_limit integer, p_deadline_ms bigint, p_synchronous_commit text
) RETURNS TABLE (
    id bigint, kind text, queue text, args jsonb, state awa.job_state, priority smallint,
    attempt integer, max_attempts integer, run_lease bigint, tags text[], metadata jsonb,
    progress jsonb, errors jsonb, created_at timestamptz, run_at timestamptz,
    attempted_at timestamptz, deadline_at timestamptz, finalized_at timestamptz,
    ordering_key text, blocked text, retry_in_ms double precision
) LANGUAGE plpgsql VOLATILE AS $$
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
            SELECT c.id, c.kind, c.queue, c.args, c.state, c.priority, c.attempt,
                c.max_attempts, c.run_lease, c.tags, nullif(c.metadata, '{}'::jsonb),
                c.progress, nullif(c.errors, '[]'::jsonb), c.created_at, c.run_at,
                c.attempted_at, c.deadline_at, c.finalized_at, c.ordering_key, NULL::text,
                NULL::float8
            FROM claimed AS c;
            GET DIAGNOSTICS v_claimed = ROW_COUNT;
        END IF;
        IF v_claimed < p_limit AND v_why IS NULL AND 0 >= ANY (v_rooms) THEN
            v_why := 'partition';
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
            SELECT c.id, c.kind, c.queue, c.args, c.state, c.priority, c.attempt,
                c.max_attempts, c.run_lease, c.tags, nullif(c.metadata, '{}'::jsonb),
                c.progress, nullif(c.errors, '[]'::jsonb), c.created_at, c.run_at,
                c.attempted_at, c.deadline_at, c.finalized_at, c.ordering_key, NULL::text,
                NULL::float8
            FROM claimed AS c;
            GET DIAGNOSTICS v_claimed = ROW_COUNT;
        END IF;
        IF lim.rate_limit IS NOT NULL AND v_claimed > 0 THEN
            INSERT INTO awa.queue_rate_buckets AS b (queue, partition_key, tokens, refilled_at)
            VALUES (p_queue, '', v_tokens - v_claimed, v_now)
            ON CONFLICT (queue, partition_key) DO UPDATE
            SET tokens = EXCLUDED.tokens, refilled_at = EXCLUDED.refilled_at;
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
$$;

-- A pool member asks while it has available jobs on any of the three claim indexes.
CREATE OR REPLACE FUNCTION awa.pool_room(p_queue text, p_now timestamptz)
RETURNS integer LANGUAGE sql STABLE AS $$
    WITH pool AS (
        SELECT total FROM awa.fleet_pool
    ), members AS (
        SELECT m.queue, m.min_workers AS mn, m.weight AS w,
            (SELECT count(*) FROM awa.jobs AS r
             WHERE r.queue = m.queue AND r.state = 'running')::integer AS r,
            m.queue = p_queue OR (m.asked_at > p_now - interval '5 seconds' AND (
                EXISTS (SELECT 1 FROM awa.jobs AS a WHERE a.queue = m.queue
                        AND a.state = 'available' AND a.partition_key IS NULL
                        AND a.ordering_key IS NULL)
                OR EXISTS (SELECT 1 FROM awa.jobs AS a WHERE a.queue = m.queue
                        AND a.state = 'available' AND a.partition_key IS NOT NULL)
                OR EXISTS (SELECT 1 FROM awa.jobs AS a WHERE a.queue = m.queue
                        AND a.state = 'available' AND a.partition_key IS NULL
                        AND a.ordering_key IS NOT NULL)
            )) AS asking
        FROM awa.fleet_pool_members AS m
    ), sums AS (
        SELECT
            sum(mn) AS sum_min,
            sum(greatest(r, mn)) FILTER (WHERE queue <> p_queue) AS others_reserved,
            coalesce(sum(greatest(0, r - mn)) FILTER (WHERE queue <> p_queue AND NOT asking), 0)
                AS settled,
            sum(w) FILTER (WHERE asking) AS asking_weight
        FROM members
    )
    SELECT least(
        pool.total - coalesce(s.others_reserved, 0) - me.r,
        me.mn + ceil(greatest(pool.total - s.sum_min - s.settled, 0)::numeric * me.w
                     / s.asking_weight)::integer - me.r)
    FROM pool, sums AS s, members AS me
    WHERE me.queue = p_queue
$$;

-- complete_and_claim (0007), unchanged but for the ordering_key column of its rows.
CREATE FUNCTION awa.complete_and_claim(
    p_outcomes jsonb, p_synchronous_commit text, p_claims jsonb
) RETURNS TABLE (
    row_type text, claim_queue text,
    id bigint, kind text, queue text, args jsonb, state awa.job_state, priority smallint,
    attempt integer, max_attempts integer, run_lease bigint, tags text[], metadata jsonb,
    progress jsonb, errors jsonb, created_at timestamptz, run_at timestamptz,
    attempted_at timestamptz, deadline_at timestamptz, finalized_at timestamptz,
    ordering_key text, blocked text, retry_in_ms double precision
) LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
    c record;
BEGIN
    PERFORM set_config('synchronous_commit', p_synchronous_commit, true);
    RETURN QUERY
    WITH done AS (
        UPDATE awa.jobs AS j
        SET state = o.state,
            run_at = CASE WHEN o.delay_ms IS NULL THEN j.run_at
                ELSE now() + o.delay_ms * interval '1 millisecond' END,
            finalized_at = CASE WHEN o.state IN ('completed', 'failed', 'cancelled')
                THEN now() END,
            attempt = CASE WHEN o.refund THEN j.attempt - 1 ELSE j.attempt END,
            errors = CASE WHEN o.error IS NULL THEN j.errors
                ELSE awa.errors_append(j.errors,
                    jsonb_build_array(o.error || jsonb_build_object('at', now())))
                END,
            progress = CASE WHEN o.state = 'completed' THEN NULL
                ELSE coalesce(o.progress, j.progress) END,
            metadata = CASE WHEN o.metadata IS NULL THEN j.metadata
                ELSE j.metadata || o.metadata END,
            heartbeat_at = NULL
        FROM jsonb_to_recordset(p_outcomes) AS o(
            id bigint, run_lease bigint, attempted_at timestamptz, state awa.job_state,
            delay_ms float8, refund boolean, error jsonb, progress jsonb, metadata jsonb
        )
        WHERE j.id = o.id AND j.run_lease = o.run_lease AND j.attempted_at = o.attempted_at
          AND j.state = 'running'
        RETURNING j.id, j.queue
    ), freed AS (
        SELECT pg_notify('awa_control', json_build_object('freed', w.queue)::text)
        FROM (
            SELECT l.queue FROM awa.queue_limits AS l
            WHERE l.concurrency IS NOT NULL AND l.queue IN (SELECT d.queue FROM done AS d)
            UNION
            SELECT p.queue FROM awa.fleet_pool_members AS p
            WHERE EXISTS (SELECT 1 FROM done AS d JOIN awa.fleet_pool_members AS m
                          ON m.queue = d.queue)
        ) AS w
    )
    SELECT 'applied'::text, NULL::text, d.id, NULL::text, NULL::text, NULL::jsonb,
        NULL::awa.job_state, NULL::smallint, NULL::integer, NULL::integer, NULL::bigint,
        NULL::text[], NULL::jsonb, NULL::jsonb, NULL::jsonb, NULL::timestamptz,
        NULL::timestamptz, NULL::timestamptz, NULL::timestamptz, NULL::timestamptz,
        NULL::text, NULL::text, NULL::float8
    FROM done AS d
    WHERE (SELECT count(*) FROM freed) >= 0;

    FOR c IN
        SELECT r.queue, r."limit", r.deadline_ms
        FROM jsonb_to_recordset(p_claims) AS r(queue text, "limit" integer, deadline_ms bigint)
    LOOP
        RETURN QUERY
        SELECT 'claimed'::text, c.queue, k.*
        FROM awa.claim(c.queue, c."limit", c.deadline_ms, p_synchronous_commit) AS k;
    END LOOP;
END
$$;

-- When a job of a key finishes, the key's next job may start: wake its queue (which may
-- be another queue than the finished job's). The WHEN clause lets every job without a
-- key, and every update that is not the step into a final state, skip the call.
CREATE FUNCTION awa.ordering_wake_next() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('awa_available', n.queue)
    FROM (
        SELECT e.queue, e.state FROM awa.jobs AS e
        WHERE e.ordering_key = NEW.ordering_key AND e.ordering_key IS NOT NULL
          AND e.state IN ('scheduled', 'available', 'running', 'retryable', 'waiting_external')
        ORDER BY e.id LIMIT 1
    ) AS n
    WHERE n.state = 'available';
    RETURN NULL;
END
$$;

CREATE TRIGGER jobs_ordering_wake_next
    AFTER UPDATE OF state ON awa.jobs
    FOR EACH ROW
    WHEN (OLD.ordering_key IS NOT NULL AND NEW.state IN ('completed', 'failed', 'cancelled')
          AND OLD.state NOT IN ('completed', 'failed', 'cancelled'))
    EXECUTE FUNCTION awa.ordering_wake_next();
