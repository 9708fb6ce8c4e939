-- job_insert: insert one job and wake its queue's dispatchers when it is available.
-- The database clock decides scheduled vs available, so producers with skewed clocks
-- cannot make a future job claimable early. A duplicate unique key violates
-- jobs_unique_idx and is mapped to UniqueConflict. Only what the caller cannot know comes
-- back: decoding a full job row costs more client CPU than the insert itself.
-- A job available now without an ordering key takes a free seat of an idle worker of its
-- queue when there is one (ADR 0045, migration 0015): it is claimed for that worker as
-- this transaction commits, and wakes nobody else. The probe is a plain EXISTS so that
-- an insert with no idle worker anywhere pays for no more than it (awa.take_seat is a
-- function call and a locking UPDATE); without a seat the queue is woken as before.
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
    RETURNING id, state, created_at, run_at, queue, ordering_key
)
SELECT id, state, created_at, run_at,
    CASE WHEN state <> 'available' THEN NULL
        WHEN ordering_key IS NULL
            AND EXISTS (SELECT FROM awa.handoff_seats AS s
                        WHERE s.queue = i.queue AND s.job_id IS NULL)
            AND awa.take_seat(queue, id) THEN NULL
        ELSE pg_notify('awa_available', queue) END AS notified
FROM inserted AS i
