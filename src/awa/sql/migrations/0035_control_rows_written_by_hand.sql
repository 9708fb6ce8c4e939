-- 0035: control rows written by hand (a review of the control plane edited with SQL).
-- Forward-only: never edit a shipped migration; add the next number instead.
--
-- 1. A claim no longer waits for a pause that has not committed (ADR 0042). The claim
--    riding on a completion (complete_and_claim) has written every queue's outcomes
--    before it claims: waiting there for a pause of one queue, left open in an
--    operator's transaction, held the finished rows of every other queue and stalled
--    their completions (231 jobs of another queue shown running past the fleet's 24
--    permits, its throughput halved, for as long as the transaction stayed open). A
--    claim that finds the gate taken claims nothing, as if paused: the pause is either
--    about to commit, or it rolls back and the next poll claims.
-- 2. A deadline override is at most 2 147 483 647 ms (24.8 days), the bound the API and
--    the CLI apply: one written by hand past 9.2e15 ms made every claim of the queue fail
--    ("interval out of range") on every worker. NOT VALID: a row already over it is
--    refused by the workers (logged once, listed as ignored) rather than failing the
--    upgrade.
-- 3. The order of conflicting min_workers overrides is their write stamp, which only the
--    API set: a row written by hand had none, sorted first, and displaced a minimum in
--    force. A trigger stamps every write that changes the value.
-- 4. Pool members belong to the pool: a member row left behind by a DELETE of the pool
--    by hand held its queue back for good (its room in a pool that no longer existed was
--    0). Orphans are removed, and deleting the pool removes its members.
-- Written to apply again over itself.

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
    -- commit; a pause of this queue not yet committed holds the gate, and the claim then
    -- claims nothing rather than wait for it (0035: a claim riding on a completion held
    -- the other queues' finished rows while it waited).
    IF NOT pg_try_advisory_xact_lock_shared(1635213682, hashtext(p_queue)) THEN
        RETURN;
    END IF;
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

ALTER TABLE awa.queue_meta DROP CONSTRAINT IF EXISTS queue_meta_override_deadline_ms_max;
ALTER TABLE awa.queue_meta ADD CONSTRAINT queue_meta_override_deadline_ms_max
    CHECK (override_deadline_ms <= 2147483647) NOT VALID;

CREATE OR REPLACE FUNCTION awa.stamp_min_workers() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.override_min_workers IS NULL THEN
        NEW.override_min_workers_at := NULL;
    ELSIF NEW.override_min_workers_at IS NULL THEN
        NEW.override_min_workers_at := now();
    ELSIF TG_OP = 'UPDATE'
        AND NEW.override_min_workers IS DISTINCT FROM OLD.override_min_workers
        AND NEW.override_min_workers_at IS NOT DISTINCT FROM OLD.override_min_workers_at
    THEN
        NEW.override_min_workers_at := now();  -- a new value written without a stamp
    END IF;
    RETURN NEW;
END
$$;

DROP TRIGGER IF EXISTS queue_meta_min_workers_stamp ON awa.queue_meta;
CREATE TRIGGER queue_meta_min_workers_stamp
    BEFORE INSERT OR UPDATE OF override_min_workers, override_min_workers_at ON awa.queue_meta
    FOR EACH ROW EXECUTE FUNCTION awa.stamp_min_workers();

UPDATE awa.queue_meta
SET override_min_workers_at = coalesce(overrides_updated_at, now())
WHERE override_min_workers IS NOT NULL AND override_min_workers_at IS NULL;

DELETE FROM awa.fleet_pool_members WHERE NOT EXISTS (SELECT FROM awa.fleet_pool);
ALTER TABLE awa.fleet_pool_members
    ADD COLUMN IF NOT EXISTS pool boolean NOT NULL DEFAULT true CHECK (pool);
ALTER TABLE awa.fleet_pool_members DROP CONSTRAINT IF EXISTS fleet_pool_members_pool_fkey;
ALTER TABLE awa.fleet_pool_members ADD CONSTRAINT fleet_pool_members_pool_fkey
    FOREIGN KEY (pool) REFERENCES awa.fleet_pool (singleton) ON DELETE CASCADE;
