-- seats_give_back: a job handed to this worker that it cannot run (it is stopping, or
-- the seat's permit was already given back): return it to available without counting
-- the attempt, lease-guarded, and wake the queue's dispatchers.
WITH returned AS (
    UPDATE awa.jobs AS j
    SET state = 'available', attempt = j.attempt - 1, run_lease = j.run_lease + 1,
        heartbeat_at = NULL, deadline_at = NULL
    WHERE j.id = %(id)s AND j.run_lease = %(run_lease)s
      AND j.attempted_at = %(attempted_at)s::timestamptz AND j.state = 'running'
    RETURNING j.queue
)
SELECT pg_notify('awa_available', r.queue) FROM returned AS r
