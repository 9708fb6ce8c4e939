-- 0031: a dead-lettered job keeps its unique key while `failed` is one of its guarded
-- states.
-- Forward-only: never edit a shipped migration; add the next number instead.
--
-- jobs_unique_idx covers awa.jobs only. A job with unique_opts states including 'failed'
-- guarded its key while it sat failed in awa.jobs, but the DLQ trigger (0002) moves a
-- failed job of a dlq=True queue into awa.dlq, where no index saw it: the duplicate the
-- user asked to refuse (a second charge after a failed one) was accepted (a review).
-- Now an insert into awa.jobs of a keyed row checks awa.dlq too and refuses it as
-- jobs_unique_idx would (the same SQLSTATE, constraint name and detail, so every insert
-- path maps it to UniqueConflict). Purging the entry (or DLQ retention) releases the key,
-- as pruning does for a row of awa.jobs.
--
-- AFTER INSERT: the row has passed jobs_unique_idx by then, so an insert that waited there
-- for the transaction moving the holder into the DLQ reads the DLQ after that commit (in
-- READ COMMITTED each statement of the function takes a new snapshot). A transaction above
-- READ COMMITTED reads the DLQ as of its snapshot and may miss a job dead-lettered since.
-- The WHEN clause keeps the function off every insert without a unique key.
-- Written to apply again over itself (the Django integration's test replays the newest).
-- SECURITY DEFINER: a producer-only role may insert jobs but not read the DLQ
-- (docs/security.md); this tells it only that a guarded key exists.

CREATE INDEX IF NOT EXISTS dlq_unique_key_idx ON awa.dlq (unique_key) WHERE unique_key IS NOT NULL;

CREATE OR REPLACE FUNCTION awa.refuse_key_held_in_dlq() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF EXISTS (
        SELECT 1 FROM awa.dlq AS d
        WHERE d.unique_key = NEW.unique_key AND d.id <> NEW.id
          AND awa.job_state_in_bitmask(d.unique_states, d.state)
    ) THEN
        RAISE EXCEPTION USING
            ERRCODE = 'unique_violation',
            CONSTRAINT = 'jobs_unique_idx',
            MESSAGE = 'duplicate key value violates unique constraint "jobs_unique_idx"',
            DETAIL = 'Key (unique_key)=(\x' || encode(NEW.unique_key, 'hex')
                     || ') already exists in the dead letter queue.';
    END IF;
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS jobs_refuse_key_held_in_dlq ON awa.jobs;
CREATE TRIGGER jobs_refuse_key_held_in_dlq
    AFTER INSERT ON awa.jobs
    FOR EACH ROW
    WHEN (NEW.unique_key IS NOT NULL)
    EXECUTE FUNCTION awa.refuse_key_held_in_dlq();

-- The job holding a unique key, for UniqueConflict.existing_id: in awa.jobs, else in the
-- DLQ. SECURITY DEFINER for the producer-only role, which cannot read the DLQ: a failed
-- look-up inside a caller's transaction would abort it.
CREATE OR REPLACE FUNCTION awa.unique_key_holder(p_key bytea) RETURNS bigint
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT coalesce(
        (SELECT j.id FROM awa.jobs AS j
         WHERE j.unique_key = p_key AND awa.job_state_in_bitmask(j.unique_states, j.state)
         LIMIT 1),
        (SELECT d.id FROM awa.dlq AS d
         WHERE d.unique_key = p_key AND awa.job_state_in_bitmask(d.unique_states, d.state)
         LIMIT 1))
$$;
