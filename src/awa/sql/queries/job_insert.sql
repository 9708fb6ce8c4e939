-- job_insert: insert one job and wake its queue's dispatchers when it is available.
-- The database clock decides scheduled vs available, so producers with skewed clocks
-- cannot make a future job claimable early. A duplicate unique key violates
-- jobs_unique_idx and is mapped to UniqueConflict. Only what the caller cannot know comes
-- back: decoding a full job row costs more client CPU than the insert itself.
WITH inserted AS (
    INSERT INTO awa.jobs (
        kind, queue, args, state, priority, original_priority, max_attempts,
        tags, metadata, run_at, unique_key, unique_states, ordering_key
    )
    VALUES (
        %(kind)s, %(queue)s, %(args)s::jsonb,
        CASE WHEN %(run_at)s::timestamptz > now() THEN 'scheduled'
            ELSE 'available' END::awa.job_state,
        %(priority)s, %(priority)s, %(max_attempts)s,
        %(tags)s::text[], %(metadata)s::jsonb, coalesce(%(run_at)s::timestamptz, now()),
        %(unique_key)s::bytea, %(unique_states)s::bit(8), %(ordering_key)s::text
    )
    RETURNING id, state, created_at, run_at, queue
)
SELECT id, state, created_at, run_at,
    CASE WHEN state = 'available' THEN pg_notify('awa_available', queue) END AS notified
FROM inserted
