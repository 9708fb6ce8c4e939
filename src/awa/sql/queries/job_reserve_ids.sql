-- job_reserve_ids: take n ids from the jobs identity sequence, with the transaction's
-- now(), and wake the batch's queues. insert_many reserves ids up front so its COPY needs
-- no RETURNING and the caller can build the Job objects without reading the rows back;
-- the ids come back as one array (one row to decode, not n). The notices are delivered at
-- commit, after the COPY that follows in the same transaction, so no dispatcher wakes to
-- an empty queue; a queue whose jobs are all scheduled gets one harmless extra poll.
SELECT
    (SELECT array_agg(nextval('awa.jobs_id_seq'::regclass)) FROM generate_series(1, %(n)s))
        AS ids,
    now() AS now,
    (SELECT count(pg_notify('awa_available', queue)) FROM unnest(%(queues)s::text[]) AS queue)
        AS notified
