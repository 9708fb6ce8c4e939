-- 0025: a job of a partitioned queue is keyed at its insert (job_insert), not only by a
-- claim's adoption: a backlog not yet adopted delayed another key's job until all of it
-- was (session 25's review). The stored partition_by is read FOR SHARE, so a change of it
-- (queue_limits_lock, FOR NO KEY UPDATE) waits for the inserts in flight, then re-keys
-- their jobs like any other.
-- SECURITY DEFINER: a producer-only role may insert jobs but neither read the limits nor
-- lock their rows (docs/security.md); this reads one queue's partition_by for it, nothing
-- else. plpgsql: its plan is cached per session (≈ 4 µs a call measured on PostgreSQL 15).
CREATE OR REPLACE FUNCTION awa.partition_key_at_insert(p_queue text, p_args jsonb)
RETURNS text LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_key text;
BEGIN
    SELECT left(coalesce(p_args ->> l.partition_by, ''), 200) INTO v_key
    FROM awa.queue_limits AS l
    WHERE l.queue = p_queue AND l.partition_by IS NOT NULL
    FOR SHARE;
    RETURN v_key;
END
$$;
