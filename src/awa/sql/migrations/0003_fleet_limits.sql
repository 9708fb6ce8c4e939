-- 0003: the fleet (CONTRACT §8–§9, ADR 0010): limits that hold across every worker
-- process and host — exact concurrency caps, rate limits and per-key partitions per
-- queue, and one weighted pool shared by member queues.
-- Forward-only: never edit a shipped migration; add the next number instead.

-- Live concurrency (design record 038 Tier 2, CONTRACT §10): per-process permits as
-- runtime overrides beside the Tier 1 ones.
ALTER TABLE awa.queue_meta
    ADD COLUMN override_max_workers integer CHECK (override_max_workers > 0),
    ADD COLUMN override_min_workers integer CHECK (override_min_workers >= 0),
    ADD COLUMN override_weight integer CHECK (override_weight > 0);

-- Per-key partitions: a job's key under its queue's partition_by, set when a claimer of
-- a partitioned queue first sees the job ("adoption", under the queue's lock). Every
-- statement that makes a job available again leaves it NULL, so a change of
-- partition_by can never strand a job under a stale key.
ALTER TABLE awa.jobs ADD COLUMN partition_key text;

-- An available job sits in exactly one of the two claim indexes: unpartitioned (and not
-- yet adopted) jobs in jobs_claim_idx, adopted ones in jobs_partition_idx. So a
-- partitioned job costs no extra index entry, and both the plain claim and adoption read
-- exactly the rows they want. A query over available jobs must say which half it wants
-- (partition_key IS NULL / IS NOT NULL), or it matches neither partial index.
DROP INDEX awa.jobs_claim_idx;
CREATE INDEX jobs_claim_idx ON awa.jobs (queue, priority, run_at, id)
    WHERE state = 'available' AND partition_key IS NULL;
CREATE INDEX jobs_partition_idx ON awa.jobs (queue, partition_key, priority, run_at, id)
    WHERE state = 'available' AND partition_key IS NOT NULL;

-- Running jobs per queue: a capped queue's claim counts them under its lock. Same number
-- of index writes per claim as before (the queue column replaces nothing; rescue by
-- heartbeat still reads this small set).
DROP INDEX awa.jobs_running_idx;
CREATE INDEX jobs_running_idx ON awa.jobs (queue, heartbeat_at) WHERE state = 'running';

-- Fleet limits of one queue (operator frequency; whole-state writes).
CREATE TABLE awa.queue_limits (
    queue        text PRIMARY KEY CHECK (char_length(queue) BETWEEN 1 AND 200),
    concurrency  integer CHECK (concurrency >= 1),
    rate_limit   double precision CHECK (rate_limit > 0 AND rate_limit <= 1e9),
    burst        integer CHECK (burst >= 1),
    partition_by text CHECK (char_length(partition_by) BETWEEN 1 AND 63),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    CHECK (burst IS NULL OR rate_limit IS NOT NULL)
);

-- Token buckets of fleet rate limits: one row per queue ('' key) or per partition.
-- The one hot row of the fleet features (a write per claim of a rate-limited queue), kept
-- apart from the low-churn control rows and given room for HOT updates.
CREATE TABLE awa.queue_rate_buckets (
    queue         text NOT NULL,
    partition_key text NOT NULL DEFAULT '',
    tokens        double precision NOT NULL,
    refilled_at   timestamptz NOT NULL,
    PRIMARY KEY (queue, partition_key)
) WITH (fillfactor = 50);

-- The fleet-wide weighted pool (design record 011 with the fleet as the unit): at most
-- one, so a singleton row.
CREATE TABLE awa.fleet_pool (
    singleton  boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    total      integer NOT NULL CHECK (total >= 1),
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Member queues. asked_at records the last claim by a member (written at most once a
-- second): a member with waiting jobs but no live claimer stops weighing on the others'
-- shares, which keeps the pool work-conserving.
CREATE TABLE awa.fleet_pool_members (
    queue       text PRIMARY KEY CHECK (char_length(queue) BETWEEN 1 AND 200),
    min_workers integer NOT NULL DEFAULT 0 CHECK (min_workers >= 0),
    weight      integer NOT NULL DEFAULT 1 CHECK (weight >= 1),
    asked_at    timestamptz
) WITH (fillfactor = 50);

-- Advisory lock classes (two-int form, apart from the leader's one-bigint key):
-- 1635213681 ('awaq') + hashtext(queue) serialises the claims of one coordinated queue;
-- 1635213680 ('awap') + 0 serialises the claims of all fleet-pool members.
-- Why a lock and a count rather than a counter row: ADR 0010.

-- Claim for a coordinated queue (fleet limits or pool membership): the same job rows as
-- job_claim_available, plus, when the fleet held the claim back, one last row with a NULL
-- id saying why ('concurrency', 'partition', 'pool', 'rate') and, for a rate limit, how
-- long until the next token. VOLATILE plpgsql: every statement after the locks takes a
-- fresh snapshot, so it sees every claim committed by earlier holders of the lock — the
-- count is exact, not a statement-start estimate.
CREATE FUNCTION awa.claim_coordinated(
    p_queue text, p_limit integer, p_deadline_ms bigint, p_synchronous_commit text
) RETURNS TABLE (
    id bigint, kind text, queue text, args jsonb, state awa.job_state, priority smallint,
    attempt integer, max_attempts integer, run_lease bigint, tags text[], metadata jsonb,
    progress jsonb, errors jsonb, created_at timestamptz, run_at timestamptz,
    attempted_at timestamptz, deadline_at timestamptz, finalized_at timestamptz,
    blocked text, retry_in_ms double precision
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
        WHERE j.id IN (
            SELECT a.id FROM awa.jobs AS a
            WHERE a.queue = p_queue AND a.state = 'available' AND a.partition_key IS NULL
            ORDER BY a.priority, a.run_at, a.id
            LIMIT 10000
            FOR UPDATE SKIP LOCKED
        );
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
            RETURN QUERY
            WITH room AS (
                SELECT r.k, r.n FROM unnest(v_keys, v_rooms) AS r(k, n) WHERE r.n > 0
            ), candidates AS (
                SELECT c.id, c.priority, c.run_at
                FROM room, LATERAL (
                    SELECT a.id, a.priority, a.run_at FROM awa.jobs AS a
                    WHERE a.queue = p_queue AND a.state = 'available' AND a.partition_key = room.k
                    ORDER BY a.priority, a.run_at, a.id
                    LIMIT room.n
                ) AS c
            ), picked AS (
                SELECT a.id FROM awa.jobs AS a
                WHERE a.id IN (
                    SELECT c.id FROM candidates AS c
                    ORDER BY c.priority, c.run_at, c.id LIMIT v_grant
                ) AND a.state = 'available'
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
                c.attempted_at, c.deadline_at, c.finalized_at, NULL::text, NULL::float8
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
        IF v_grant > 0 THEN
            RETURN QUERY
            WITH picked AS (
                SELECT a.id FROM awa.jobs AS a
                WHERE a.queue = p_queue AND a.state = 'available' AND a.partition_key IS NULL
                ORDER BY a.priority, a.run_at, a.id
                LIMIT v_grant
                FOR UPDATE SKIP LOCKED
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
                c.attempted_at, c.deadline_at, c.finalized_at, NULL::text, NULL::float8
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

-- How many more jobs the fleet pool lets p_queue run now (NULL: not a member). Design
-- record 011's fair share with the fleet as the unit and running jobs as holdings:
--   overflow  = total − Σ min_workers
--   free      = total − Σ over the other members of greatest(running, min_workers) − running
--               (another member's unused minimum stays reserved for it)
--   settled   = Σ over other members not asking of greatest(0, running − min_workers)
--   share     = ceil((overflow − settled) × weight / Σ weight of asking members)
--   room      = least(free, min_workers + share − running)
-- A member asks when it has available jobs and claimed within the last 5 s (the caller
-- always asks). Called by claim_coordinated under the pool lock.
CREATE FUNCTION awa.pool_room(p_queue text, p_now timestamptz)
RETURNS integer LANGUAGE sql STABLE AS $$
    WITH pool AS (
        SELECT total FROM awa.fleet_pool
    ), members AS (
        SELECT m.queue, m.min_workers AS mn, m.weight AS w,
            (SELECT count(*) FROM awa.jobs AS r
             WHERE r.queue = m.queue AND r.state = 'running')::integer AS r,
            m.queue = p_queue OR (m.asked_at > p_now - interval '5 seconds' AND (
                EXISTS (SELECT 1 FROM awa.jobs AS a WHERE a.queue = m.queue
                        AND a.state = 'available' AND a.partition_key IS NULL)
                OR EXISTS (SELECT 1 FROM awa.jobs AS a WHERE a.queue = m.queue
                        AND a.state = 'available' AND a.partition_key IS NOT NULL)
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
