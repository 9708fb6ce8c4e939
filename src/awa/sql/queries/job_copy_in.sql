-- job_copy_in: bulk insert through COPY (the fast path of insert_many).
-- The statement-level trigger still sends one wake-up per queue.
COPY awa.jobs (
    id, kind, queue, args, state, priority, original_priority, max_attempts,
    tags, metadata, run_at, unique_key, unique_states
) FROM STDIN
