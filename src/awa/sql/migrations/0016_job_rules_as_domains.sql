-- 0016: awa.jobs' value rules move from table CHECK constraints to domains (ADR 0047).
-- Forward-only: never edit a shipped migration; add the next number instead.
--
-- The rules are the same: kind and queue 1–200 characters, priority 1–4, attempt ≥ 0,
-- max_attempts 1–1000, at most 20 tags, an ordering key of 1–255 characters. What
-- changes is when PostgreSQL checks them, and at what cost. A table CHECK is evaluated
-- on every insert and every update of the row, whichever columns the update sets, and
-- each statement that runs one first rebuilds its expression from the catalog text
-- (measured here: 20–25 µs per UPDATE statement, 17 µs per INSERT, on the 2-core VM).
-- A job's claim and its completion set state and timestamps only, and pay that for
-- eight rules they cannot break. A domain's rule is checked only where a value is
-- coerced to the domain, i.e. where a statement writes that column, and its compiled
-- form is cached per backend.
--
-- The constraints keep their names (jobs_priority_check, …), so a violation still names
-- the field in awa's ValidationError. priority and original_priority share one domain
-- and one name. awa.dlq (LIKE awa.jobs, 0002) keeps its own table constraints: its rows
-- are written once.
--
-- Order matters, for the table is neither rewritten nor re-indexed: the domains are
-- created without rules, so a column's change of type is a relabel (a domain with rules
-- would force a rewrite); the one trigger whose WHEN reads a changed column is dropped
-- and re-created around it; then each rule is added to its domain, which checks every
-- existing row in one scan.

CREATE DOMAIN awa.job_kind AS text;
CREATE DOMAIN awa.job_queue AS text;
CREATE DOMAIN awa.job_priority AS smallint;
CREATE DOMAIN awa.job_attempt AS integer;
CREATE DOMAIN awa.job_max_attempts AS integer;
CREATE DOMAIN awa.job_tags AS text[];
CREATE DOMAIN awa.job_ordering_key AS text;

DROP TRIGGER jobs_ordering_wake_next ON awa.jobs;

ALTER TABLE awa.jobs
    DROP CONSTRAINT jobs_kind_check,
    DROP CONSTRAINT jobs_queue_check,
    DROP CONSTRAINT jobs_priority_check,
    DROP CONSTRAINT jobs_original_priority_check,
    DROP CONSTRAINT jobs_attempt_check,
    DROP CONSTRAINT jobs_max_attempts_check,
    DROP CONSTRAINT jobs_tags_check,
    DROP CONSTRAINT jobs_ordering_key_check,
    ALTER COLUMN kind TYPE awa.job_kind,
    ALTER COLUMN queue TYPE awa.job_queue,
    ALTER COLUMN priority TYPE awa.job_priority,
    ALTER COLUMN original_priority TYPE awa.job_priority,
    ALTER COLUMN attempt TYPE awa.job_attempt,
    ALTER COLUMN max_attempts TYPE awa.job_max_attempts,
    ALTER COLUMN tags TYPE awa.job_tags,
    ALTER COLUMN ordering_key TYPE awa.job_ordering_key;

CREATE TRIGGER jobs_ordering_wake_next
    AFTER UPDATE OF state ON awa.jobs
    FOR EACH ROW
    WHEN (OLD.ordering_key IS NOT NULL AND NEW.state IN ('completed', 'failed', 'cancelled')
          AND OLD.state NOT IN ('completed', 'failed', 'cancelled'))
    EXECUTE FUNCTION awa.ordering_wake_next();

ALTER DOMAIN awa.job_kind
    ADD CONSTRAINT jobs_kind_check CHECK (char_length(VALUE) BETWEEN 1 AND 200);
ALTER DOMAIN awa.job_queue
    ADD CONSTRAINT jobs_queue_check CHECK (char_length(VALUE) BETWEEN 1 AND 200);
ALTER DOMAIN awa.job_priority
    ADD CONSTRAINT jobs_priority_check CHECK (VALUE BETWEEN 1 AND 4);
ALTER DOMAIN awa.job_attempt
    ADD CONSTRAINT jobs_attempt_check CHECK (VALUE >= 0);
ALTER DOMAIN awa.job_max_attempts
    ADD CONSTRAINT jobs_max_attempts_check CHECK (VALUE BETWEEN 1 AND 1000);
ALTER DOMAIN awa.job_tags
    ADD CONSTRAINT jobs_tags_check CHECK (cardinality(VALUE) <= 20);
ALTER DOMAIN awa.job_ordering_key
    ADD CONSTRAINT jobs_ordering_key_check CHECK (char_length(VALUE) BETWEEN 1 AND 255);

-- The claims return awa.jobs columns through RETURN QUERY, which wants each column's
-- declared type exactly: the three claim functions are re-created with the domain
-- columns cast back to their base types (a relabel, no work). Bodies otherwise as
-- 0008 (claim_coordinated_locked, renamed by 0009), 0013 and 0014 left them.

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
            UPDATE awa.fleet_pool_members AS m SET asked_at = v_now
            WHERE m.queue = p_queue
              AND (m.asked_at IS NULL OR m.asked_at < v_now - interval '1 second');
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
$function$;

CREATE OR REPLACE FUNCTION awa.claim(p_queue text, p_limit integer, p_deadline_ms bigint, p_synchronous_commit text, p_instance text DEFAULT NULL::text, p_held integer DEFAULT NULL::integer, p_freed integer DEFAULT 0)
 RETURNS TABLE(id bigint, kind text, queue text, args jsonb, state awa.job_state, priority smallint, attempt integer, max_attempts integer, run_lease bigint, tags text[], metadata jsonb, progress jsonb, errors jsonb, created_at timestamp with time zone, run_at timestamp with time zone, attempted_at timestamp with time zone, deadline_at timestamp with time zone, finalized_at timestamp with time zone, ordering_key text, blocked text, retry_in_ms double precision)
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
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
        RETURNING j.id, j.kind::text, j.queue::text, j.args, j.state, j.priority::smallint,
            j.attempt::integer, j.max_attempts::integer, j.run_lease, j.tags::text[],
            nullif(j.metadata, '{}'::jsonb), j.progress, nullif(j.errors, '[]'::jsonb),
            j.created_at, j.run_at, j.attempted_at, j.deadline_at, j.finalized_at,
            j.ordering_key::text, NULL::text, NULL::float8;
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
    RETURNING j.id, j.kind::text, j.queue::text, j.args, j.state, j.priority::smallint,
        j.attempt::integer, j.max_attempts::integer, j.run_lease, j.tags::text[],
        nullif(j.metadata, '{}'::jsonb), j.progress, nullif(j.errors, '[]'::jsonb),
        j.created_at, j.run_at, j.attempted_at, j.deadline_at, j.finalized_at,
        j.ordering_key::text, NULL::text, NULL::float8;
END
$function$;

-- A column's change of type drops its statistics; the planner gets them back now rather
-- than at autovacuum's next visit.
ANALYZE awa.jobs;
