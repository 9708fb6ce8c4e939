-- 0038: finished jobs counted as they change, not by reading them (ADR 0054).
-- Forward-only: never edit a shipped migration; add the next number instead.
--
-- queue_stats() counted the retained completed, failed and cancelled jobs by reading
-- every one of them: about a second for 3 million (24 h of retention at 35 jobs/s), on
-- every dashboard refresh and metrics scrape. Counts are now kept per (queue, state,
-- time bucket of finalized_at):
--
-- * whatever finishes a job or takes one out of a finished state appends a change to
--   awa.finished_count_changes, in its own transaction: the worker's outcomes one row
--   per queue, state and second of each batch (awa.complete_and_claim); every other
--   path (cancels, retries, rescues, the DLQ move, retention, SQL written by hand) by
--   triggers, per row for updates and inserts (a WHEN keeps them off claims, heartbeats
--   and the outcomes), per statement for deletes;
-- * the maintenance leader folds those rows into awa.finished_counts every few seconds
--   (awa.fold_finished_counts), coarsening the buckets as they age: a second while in
--   the last 2 minutes, then a minute while in the last 2 hours, then an hour;
-- * a reader adds both (awa.finished_counts_by_queue): exact totals, the last minute to
--   the second and the last hour to the minute, from a few hundred rows per queue.
--
-- Appending, not updating one counter row, keeps concurrent completions from queueing
-- on a row lock (and a statement trigger with transition tables on every update cost
-- claims and heartbeats 7–8 % of a W1 drain, measured); a fold that runs beside them
-- takes only committed rows (DELETE … RETURNING), so nothing is counted twice or lost.
-- The functions are SECURITY DEFINER: a role granted what docs/security.md lists needs no
-- grant on the two new tables. The two a role could call to write counts (the outcomes'
-- and the fold) are not PUBLIC's: they are granted to the roles that may update awa.jobs
-- (a read-only or producer-only role could otherwise write any count; a check of
-- session_user inside them refused workers that SET ROLE, and was passed by a function
-- of a producer's run by autovacuum).
-- Written to apply again over itself (the Django integration's test replays the newest):
-- the counts are rebuilt from the jobs, under the trigger's table lock.

CREATE TABLE IF NOT EXISTS awa.finished_counts (
    queue text NOT NULL,
    state awa.job_state NOT NULL,
    at    timestamptz NOT NULL,  -- the bucket's start ('-infinity': no finalized_at)
    n     bigint NOT NULL,
    PRIMARY KEY (queue, state, at)
);

CREATE TABLE IF NOT EXISTS awa.finished_count_changes (
    queue text NOT NULL,
    state awa.job_state NOT NULL,
    at    timestamptz NOT NULL,  -- the second of finalized_at
    n     bigint NOT NULL
);
-- No key (appended, deleted whole by the fold): under a publication of all tables (CDC,
-- logical replication) a delete needs a replica identity, which a key would make every
-- append pay for.
ALTER TABLE awa.finished_count_changes REPLICA IDENTITY FULL;

-- The second a change is appended under: that of finalized_at ('-infinity' for a finished
-- row written without one, counted in the totals and never in a window).
CREATE OR REPLACE FUNCTION awa.finished_second(p_at timestamptz)
RETURNS timestamptz LANGUAGE sql STABLE AS $$
    SELECT coalesce(date_trunc('second', p_at, 'UTC'), '-infinity')
$$;

-- The bucket a count of jobs finalized at p_at is kept in, folded at p_now. Each band is
-- chosen by the truncated time, so a bucket's start is its own bucket (the fold relies on
-- it: the buckets it writes are never among those it coarsens).
CREATE OR REPLACE FUNCTION awa.finished_bucket(p_at timestamptz, p_now timestamptz)
RETURNS timestamptz LANGUAGE sql STABLE AS $$
    SELECT CASE
        WHEN NOT isfinite(p_at) THEN p_at
        WHEN date_trunc('second', p_at, 'UTC') >= p_now - interval '2 minutes'
            THEN date_trunc('second', p_at, 'UTC')
        WHEN date_trunc('minute', p_at, 'UTC') >= p_now - interval '2 hours'
            THEN date_trunc('minute', p_at, 'UTC')
        ELSE date_trunc('hour', p_at, 'UTC')
    END
$$;

-- A row that enters or leaves a finished state, or moves between buckets: a change row
-- each way. Rare beside the worker's own outcomes, which count themselves in
-- awa.complete_and_claim (below) with the flag awa.outcomes_counted: the trigger's WHEN
-- keeps it off claims, heartbeats and those outcomes, so they pay nothing here. A
-- statement run from inside another trigger (the DLQ move, an ordered job's successor) is
-- counted here whatever the flag says.
CREATE OR REPLACE FUNCTION awa.count_finished_row() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND OLD.state IN ('completed', 'failed', 'cancelled') THEN
        INSERT INTO awa.finished_count_changes (queue, state, at, n)
        VALUES (OLD.queue::text, OLD.state,
            awa.finished_second(OLD.finalized_at), -1);
    END IF;
    IF NEW.state IN ('completed', 'failed', 'cancelled') THEN
        INSERT INTO awa.finished_count_changes (queue, state, at, n)
        VALUES (NEW.queue::text, NEW.state,
            awa.finished_second(NEW.finalized_at), 1);
    END IF;
    RETURN NULL;
END
$$;

-- Deletes, by statement over the deleted rows (retention deletes thousands at a time).
CREATE OR REPLACE FUNCTION awa.count_finished_deleted() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    INSERT INTO awa.finished_count_changes (queue, state, at, n)
    SELECT r.queue::text, r.state,
        awa.finished_second(r.finalized_at), -count(*)
    FROM old_rows AS r WHERE r.state IN ('completed', 'failed', 'cancelled')
    GROUP BY 1, 2, 3;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION awa.count_finished_truncated() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    DELETE FROM awa.finished_count_changes;
    DELETE FROM awa.finished_counts;
    RETURN NULL;
END
$$;

-- The worker's outcomes, counted by awa.complete_and_claim: one call per batch (STRICT:
-- none at all for a batch that finished no job). plpgsql, whose plan is kept: a SQL
-- function with a SET clause was planned again on every call (+35 µs, a review).
CREATE OR REPLACE FUNCTION awa.count_finished_outcomes(
    p_queues text[], p_states awa.job_state[], p_at timestamptz[], p_n bigint[]
) RETURNS integer
LANGUAGE plpgsql STRICT SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    INSERT INTO awa.finished_count_changes (queue, state, at, n)
    SELECT * FROM unnest(p_queues, p_states, p_at, p_n);
    RETURN 1;
END
$$;

DROP TRIGGER IF EXISTS jobs_count_finished_update ON awa.jobs;
CREATE TRIGGER jobs_count_finished_update AFTER UPDATE ON awa.jobs FOR EACH ROW
    WHEN ((OLD.state IN ('completed', 'failed', 'cancelled')
            OR NEW.state IN ('completed', 'failed', 'cancelled'))
        AND (OLD.state IS DISTINCT FROM NEW.state
            OR OLD.finalized_at IS DISTINCT FROM NEW.finalized_at
            OR OLD.queue IS DISTINCT FROM NEW.queue)
        AND (current_setting('awa.outcomes_counted', true) IS DISTINCT FROM 'on'
            OR pg_trigger_depth() > 0))
    EXECUTE FUNCTION awa.count_finished_row();
DROP TRIGGER IF EXISTS jobs_count_finished_insert ON awa.jobs;
CREATE TRIGGER jobs_count_finished_insert AFTER INSERT ON awa.jobs FOR EACH ROW
    WHEN (NEW.state IN ('completed', 'failed', 'cancelled'))  -- none of awa's own inserts
    EXECUTE FUNCTION awa.count_finished_row();
DROP TRIGGER IF EXISTS jobs_count_finished_delete ON awa.jobs;
CREATE TRIGGER jobs_count_finished_delete AFTER DELETE ON awa.jobs
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION awa.count_finished_deleted();
DROP TRIGGER IF EXISTS jobs_count_finished_truncate ON awa.jobs;
CREATE TRIGGER jobs_count_finished_truncate AFTER TRUNCATE ON awa.jobs
    FOR EACH STATEMENT EXECUTE FUNCTION awa.count_finished_truncated();

-- Fold the appended changes into the counts, and coarsen the buckets that aged past
-- their width; returns how many change rows it folded. Safe beside another fold: each
-- takes the committed change rows it deleted, and writes counts by upsert.
CREATE OR REPLACE FUNCTION awa.fold_finished_counts() RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_folded bigint;
BEGIN
    WITH changes AS (
        DELETE FROM awa.finished_count_changes RETURNING queue, state, at, n
    ), aged AS (
        DELETE FROM awa.finished_counts AS c
        WHERE c.at < now() - interval '2 minutes' AND c.at <> awa.finished_bucket(c.at, now())
        RETURNING c.queue, c.state, c.at, c.n
    ), moved AS (
        SELECT m.queue, m.state, awa.finished_bucket(m.at, now()) AS at, sum(m.n) AS n
        FROM (SELECT * FROM changes UNION ALL SELECT * FROM aged) AS m
        GROUP BY 1, 2, 3
    ), written AS (
        INSERT INTO awa.finished_counts AS c (queue, state, at, n)
        SELECT queue, state, at, n FROM moved
        ON CONFLICT (queue, state, at) DO UPDATE SET n = c.n + excluded.n
    )
    SELECT count(*) INTO v_folded FROM changes;
    DELETE FROM awa.finished_counts WHERE n = 0;
    RETURN v_folded;
END
$$;

-- Per queue with finished jobs: the retained completed, failed and cancelled jobs, and
-- the completions of the last hour (to the minute) and of the last minute (to the second).
-- Counts and pending changes are both read in the bucket a fold now would put them in: a
-- change read by its second beside its job's +1 in a minute bucket took the window to -3
-- where the table said 2 (a review), and a read gives what it gives after the next fold.
CREATE OR REPLACE FUNCTION awa.finished_counts_by_queue()
RETURNS TABLE (queue text, completed bigint, completed_last_hour bigint,
    completed_last_minute bigint, failed bigint, cancelled bigint)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT c.queue,
        coalesce(sum(c.n) FILTER (WHERE c.state = 'completed'), 0)::bigint,
        coalesce(sum(c.n) FILTER (
            WHERE c.state = 'completed' AND c.at > now() - interval '1 hour'), 0)::bigint,
        coalesce(sum(c.n) FILTER (
            WHERE c.state = 'completed' AND c.at > now() - interval '1 minute'), 0)::bigint,
        coalesce(sum(c.n) FILTER (WHERE c.state = 'failed'), 0)::bigint,
        coalesce(sum(c.n) FILTER (WHERE c.state = 'cancelled'), 0)::bigint
    FROM (
        SELECT f.queue, f.state, awa.finished_bucket(f.at, now()) AS at, f.n
        FROM awa.finished_counts AS f
        UNION ALL
        SELECT g.queue, g.state, awa.finished_bucket(g.at, now()), g.n
        FROM awa.finished_count_changes AS g
    ) AS c
    GROUP BY c.queue
    HAVING sum(c.n) <> 0
$$;

-- The worker's outcomes count the jobs they finish (the rest of the body is 0029's).
CREATE OR REPLACE FUNCTION awa.complete_and_claim(
    p_outcomes jsonb, p_synchronous_commit text, p_claims jsonb
) RETURNS TABLE (
    row_type text, claim_queue text,
    id bigint, kind text, queue text, args jsonb, state awa.job_state, priority smallint,
    attempt integer, max_attempts integer, run_lease bigint, tags text[], metadata jsonb,
    progress jsonb, errors jsonb, created_at timestamptz, run_at timestamptz,
    attempted_at timestamptz, deadline_at timestamptz, finalized_at timestamptz,
    ordering_key text, blocked text, retry_in_ms double precision
) LANGUAGE plpgsql VOLATILE SET plan_cache_mode = force_generic_plan AS $$
#variable_conflict use_column
DECLARE
    c        record;
    v_ids    bigint[];
    v_queues text[];  -- the queue of each outcome applied, for the claims' p_freed
BEGIN
    -- The outcomes count the jobs they finish themselves, one change row per queue, state
    -- and second (the counted CTE): the per-row trigger stands aside for this statement.
    PERFORM set_config('synchronous_commit', p_synchronous_commit, true),
        set_config('awa.outcomes_counted', 'on', true);
    PERFORM FROM awa.jobs AS j
    WHERE j.id = ANY (ARRAY(
            SELECT (e ->> 'id')::bigint FROM jsonb_array_elements(p_outcomes) AS e))
      AND j.state::text = 'running'
    ORDER BY j.id
    FOR UPDATE;
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
        -- Found by primary key, never through jobs_running_idx: that index holds an entry
        -- for every job run since the last vacuum, and a bitmap scan of it (the plan the
        -- 0008 form got) visits all of them on every call, so each call cost more as a
        -- drain went on (0.97 → 2.3 ms for 8 outcomes over 20 000 jobs). ``state::text``
        -- keeps the planner off that partial index; the ids come as an array so the
        -- lookup is by key whatever the statistics (as in the claim).
        WHERE j.id = ANY (ARRAY(
                SELECT (e ->> 'id')::bigint FROM jsonb_array_elements(p_outcomes) AS e))
          AND j.id = o.id AND j.run_lease = o.run_lease AND j.attempted_at = o.attempted_at
          AND j.state::text = 'running'
        RETURNING j.id, j.queue, j.state, j.finalized_at
    ), counted AS (
        SELECT awa.count_finished_outcomes(
            array_agg(g.queue), array_agg(g.state), array_agg(g.at), array_agg(g.n))
        FROM (
            SELECT d.queue::text AS queue, d.state, awa.finished_second(d.finalized_at) AS at,
                count(*) AS n
            FROM done AS d WHERE d.state IN ('completed', 'failed', 'cancelled')
            GROUP BY 1, 2, 3
        ) AS g
    ), unclaimed AS (
        -- A queue with a riding claim announces what that claim leaves (claim_coordinated).
        SELECT d.queue FROM done AS d
        WHERE d.queue NOT IN (
            SELECT r.queue FROM jsonb_to_recordset(p_claims) AS r(queue text))
    ), freed AS (
        -- Only capped queues and pool members are announced (the join keeps plain queues
        -- from calling at all); a notice sent twice in one transaction is delivered once.
        SELECT awa.announce_freed(w.queue, w.capped, w.member)
        FROM (
            SELECT DISTINCT u.queue, l.queue IS NOT NULL AS capped, m.queue IS NOT NULL AS member
            FROM unclaimed AS u
            LEFT JOIN awa.queue_limits AS l ON l.queue = u.queue AND l.concurrency IS NOT NULL
            LEFT JOIN awa.fleet_pool_members AS m ON m.queue = u.queue
        ) AS w
        WHERE w.capped OR w.member
    )
    SELECT coalesce(array_agg(d.id), '{}'), coalesce(array_agg(d.queue), '{}')
    INTO v_ids, v_queues
    FROM done AS d
    WHERE (SELECT count(*) FROM freed) >= 0 AND (SELECT count(*) FROM counted) >= 0;
    PERFORM set_config('awa.outcomes_counted', 'off', true);
    RETURN QUERY
    SELECT 'applied'::text, NULL::text, d.id, NULL::text, NULL::text, NULL::jsonb,
        NULL::awa.job_state, NULL::smallint, NULL::integer, NULL::integer, NULL::bigint,
        NULL::text[], NULL::jsonb, NULL::jsonb, NULL::jsonb, NULL::timestamptz,
        NULL::timestamptz, NULL::timestamptz, NULL::timestamptz, NULL::timestamptz,
        NULL::text, NULL::text, NULL::float8
    FROM unnest(v_ids) AS d(id);

    FOR c IN
        SELECT r.queue, r."limit", r.deadline_ms, r.instance, r.held
        FROM jsonb_to_recordset(p_claims)
            AS r(queue text, "limit" integer, deadline_ms bigint, instance text, held integer)
        -- The claims' locks in one order for every transaction: pool members first (a
        -- member's claim takes the pool's lock before its queue's), then by queue name.
        ORDER BY NOT EXISTS (SELECT FROM awa.fleet_pool_members AS m WHERE m.queue = r.queue),
            r.queue
    LOOP
        RETURN QUERY
        SELECT 'claimed'::text, c.queue, k.*
        FROM awa.claim(
            c.queue, c."limit", c.deadline_ms, p_synchronous_commit, c.instance, c.held,
            (SELECT count(*)::integer FROM unnest(v_queues) AS f(q) WHERE f.q = c.queue)) AS k;
    END LOOP;
END
$$;

-- Executable by the roles that may write the jobs (now; docs/security.md's grant block
-- names the functions for roles granted later), table- or column-wise, directly or as a
-- group that login roles inherit or SET ROLE to.
REVOKE EXECUTE ON FUNCTION awa.count_finished_outcomes(text[], awa.job_state[],
    timestamptz[], bigint[]), awa.fold_finished_counts() FROM PUBLIC;
DO $$
DECLARE
    r record;
BEGIN
    -- From the catalog, not information_schema, which lists only the grants whose
    -- grantor or grantee is a role the migrating role is (or is a member of).
    FOR r IN
        SELECT DISTINCT g.grantee FROM (
            SELECT a.grantee FROM pg_class AS c, aclexplode(c.relacl) AS a
            WHERE c.oid = 'awa.jobs'::regclass AND a.privilege_type = 'UPDATE'
            UNION ALL
            SELECT a.grantee FROM pg_attribute AS t, aclexplode(t.attacl) AS a
            WHERE t.attrelid = 'awa.jobs'::regclass AND a.privilege_type = 'UPDATE'
        ) AS g
    LOOP
        -- regrole's text is the role's name quoted as an identifier
        EXECUTE 'GRANT EXECUTE ON FUNCTION awa.count_finished_outcomes(text[], '
            'awa.job_state[], timestamptz[], bigint[]), awa.fold_finished_counts() TO '
            || CASE WHEN r.grantee = 0 THEN 'PUBLIC' ELSE r.grantee::regrole::text END;
    END LOOP;
END
$$;

-- Rebuilt from the jobs: CREATE TRIGGER above holds a lock that keeps every write to
-- awa.jobs out until this migration commits.
DELETE FROM awa.finished_count_changes;
DELETE FROM awa.finished_counts;
INSERT INTO awa.finished_counts (queue, state, at, n)
SELECT queue::text, state,
    awa.finished_bucket(awa.finished_second(finalized_at), now()), count(*)
FROM awa.jobs
WHERE state IN ('completed', 'failed', 'cancelled')
GROUP BY 1, 2, 3;
