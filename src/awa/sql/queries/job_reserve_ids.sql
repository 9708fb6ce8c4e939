-- job_reserve_ids: take n ids from the jobs identity sequence, with the transaction's now().
-- insert_many reserves ids up front so its COPY needs no RETURNING and the caller can
-- build the Job objects without reading the rows back.
SELECT nextval('awa.jobs_id_seq'::regclass) AS id, now() AS now
FROM generate_series(1, %(n)s)
