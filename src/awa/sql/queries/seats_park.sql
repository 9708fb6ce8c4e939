-- seats_park: an idle worker parks free permits of its queues as handoff seats (ADR 0045,
-- migration 0015), one row per permit, named by the worker's notice channel. A single
-- insert of a job for the queue then takes a seat and the job is claimed for this worker
-- at that insert's commit. Each seat lapses at expires_at unless renewed (seats_renew),
-- so a worker that died stops taking jobs within the TTL; before that, producers skip a
-- seat whose listener_pid (the worker's LISTEN connection's server process) has ended
-- (migration 0019). db_now: the database's clock, from which the worker learns its own
-- clock's offset (a handed-over job's age is reckoned from its claim's database time).
INSERT INTO awa.handoff_seats (queue, channel, deadline_ms, expires_at, listener_pid)
SELECT p.queue, %(channel)s::text, p.deadline_ms,
    now() + %(ttl_ms)s::bigint * interval '1 millisecond', %(listener_pid)s::integer
FROM unnest(%(queues)s::text[], %(deadline_ms)s::bigint[]) AS p(queue, deadline_ms)
RETURNING seat_id, queue, extract(epoch FROM now())::float8 AS db_now
