-- job_insert: insert one job and wake its queue's dispatchers when it is available.
-- The database clock decides scheduled vs available, so producers with skewed clocks
-- cannot make a future job claimable early. A duplicate unique key violates
-- jobs_unique_idx (mapped to UniqueConflict), unless the unique part below skips it.
-- Only what the caller cannot know comes back.
-- A job available now without an ordering key takes a free seat of an idle worker of its
-- queue when there is one (ADR 0045, migration 0015): claimed for that worker as this
-- transaction commits, it wakes nobody else. The plain EXISTS spares awa.take_seat (a
-- call and a locking UPDATE) when no worker is idle; then the queue is woken as before.
-- notified: NULL when nobody was woken. No CTE around the INSERT (~7 µs a call).
-- A job available now of a queue partitioned by a fleet limit (ADR 0010) is keyed here,
-- not left to a claim's adoption: behind a backlog of jobs not yet adopted, it would wait
-- until they all were (one key's backlog delaying another's job). The function holds the
-- queue's partitioning lock shared (migration 0025), so a change of partition_by
-- (queue_partition_lock) waits for this transaction and then re-keys its job.
-- sql.JOB_INSERT_UNSEATED is this statement less its seat part (ADR 0049).
-- A unique job's insert outside a caller's transaction (sql.JOB_INSERT_UNIQUE*, with the
-- unique part) skips a duplicate and returns no row: the index's error made the server log
-- an ERROR and the statement for every routine conflict (ADR 0056; inside a transaction,
-- above READ COMMITTED, ON CONFLICT fails to serialize instead). The others leave the clause out: ON CONFLICT makes every
-- insert a speculative one (a token lock and a confirming WAL record), key or not.
INSERT INTO awa.jobs AS j (
    kind, queue, args, state, priority, original_priority, max_attempts,
    tags, metadata, run_at, unique_key, unique_states, ordering_key, partition_key
)
VALUES (
    %(kind)s, %(queue)s, %(args)s::jsonb,
    CASE WHEN %(run_at)s::timestamptz > now() THEN 'scheduled'
        ELSE 'available' END::awa.job_state,
    %(priority)s, %(priority)s, %(max_attempts)s,
    %(tags)s::text[], %(metadata)s::jsonb, coalesce(%(run_at)s::timestamptz, now()),
    %(unique_key)s::bytea, %(unique_states)s::bit(8), %(ordering_key)s::text,
    CASE WHEN %(run_at)s::timestamptz > now() THEN NULL
        ELSE awa.partition_key_at_insert(%(queue)s::awa.job_queue, %(args)s::jsonb) END
)
-- unique {
ON CONFLICT (unique_key)
    WHERE unique_key IS NOT NULL AND awa.job_state_in_bitmask(unique_states, state)
    DO NOTHING
-- } unique
RETURNING j.id, j.state, j.created_at, j.run_at,
    CASE WHEN j.state <> 'available' THEN NULL
        -- seat {
        WHEN j.ordering_key IS NULL
            AND EXISTS (SELECT FROM awa.handoff_seats AS s
                        WHERE s.queue = j.queue AND s.job_id IS NULL)
            -- above READ COMMITTED (an application's transaction), taking a seat an idle
            -- worker renewed since the snapshot failed to serialize, and with it the
            -- application's whole transaction (a review): such an insert wakes the queue
            AND current_setting('transaction_isolation') = 'read committed'
            AND awa.take_seat(j.queue, j.id) THEN NULL
        -- } seat
        ELSE pg_notify('awa_available', j.queue) END AS notified
