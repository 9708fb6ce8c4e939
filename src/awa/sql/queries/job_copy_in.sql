-- job_copy_in: bulk insert through COPY (the fast path of insert_many).
-- The wake-ups for the batch's queues were queued by job_reserve_ids in the same
-- transaction; COPY itself cannot notify.
COPY awa.jobs (
    id, kind, queue, args, state, priority, original_priority, max_attempts,
    tags, metadata, run_at, unique_key, unique_states, ordering_key
) FROM STDIN
