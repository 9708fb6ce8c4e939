-- 0025: a job of a partitioned queue is keyed at its insert (job_insert), not only by a
-- claim's adoption: a backlog not yet adopted delayed another key's job until all of it
-- was (session 25's review).
-- A change of partition_by must not miss a job keyed by the old one in a transaction still
-- open: the insert holds a shared advisory lock on the queue's partitioning until it ends
-- (key 1635213683: 1635213679–82 are the ordering, pool, claim and pause-gate locks), and
-- a change takes it exclusively first (queue_partition_lock), so it waits for those
-- inserts, then re-keys their jobs; an insert that comes while a change waits or runs
-- waits for it, then reads the new partition_by. Do not change a queue's partition_by in
-- a transaction that inserted into it: the change would wait for that very transaction. Lock-manager locks queue fairly: a row lock FOR SHARE, tried first, let
-- a stream of overlapping inserts starve a change for good, cost a multixact per insert,
-- and failed REPEATABLE READ producers after any limits change.
-- A transaction above READ COMMITTED reads the limits as of its snapshot, which may
-- predate a change: its job is left to adoption (NULL), as before this migration.
-- SECURITY DEFINER: a producer-only role may insert jobs but not read the limits
-- (docs/security.md); this reads one queue's partition_by for it, nothing else.
-- plpgsql: its plans are cached per session (≈ 4 µs a call on PostgreSQL 15).
CREATE OR REPLACE FUNCTION awa.partition_key_at_insert(p_queue text, p_args jsonb)
RETURNS text LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_by text;
BEGIN
    SELECT l.partition_by INTO v_by
    FROM awa.queue_limits AS l
    WHERE l.queue = p_queue AND l.partition_by IS NOT NULL;
    IF v_by IS NULL OR current_setting('transaction_isolation') <> 'read committed' THEN
        RETURN NULL;  -- not partitioned (no lock taken), or left to adoption
    END IF;
    PERFORM pg_advisory_xact_lock_shared(1635213683, hashtext(p_queue));
    -- Again, after the lock: a change that held it has committed by now.
    SELECT l.partition_by INTO v_by FROM awa.queue_limits AS l WHERE l.queue = p_queue;
    IF v_by IS NULL THEN
        RETURN NULL;
    END IF;
    RETURN left(coalesce(p_args ->> v_by, ''), 200);
END
$$;
