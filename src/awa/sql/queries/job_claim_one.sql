-- job_claim_one: claim one specific available job (awa.testing's inline mode runs the
-- job just inserted, not whichever is first in the queue). Same attempt bookkeeping as
-- job_claim_available, without a deadline; never used by workers. An ordered job is
-- claimed only at its key's turn (ADR 0034), and a job of a paused queue not at all, as
-- by a worker: none comes back otherwise.
UPDATE awa.jobs
SET state = 'running',
    attempt = attempt + 1,
    run_lease = run_lease + 1,
    attempted_at = now(),
    heartbeat_at = now(),
    deadline_at = NULL
WHERE id = %(id)s AND state = 'available'
  AND (ordering_key IS NULL OR awa.ordering_ready(ordering_key, id))
  AND NOT EXISTS (SELECT 1 FROM awa.queue_meta AS m WHERE m.queue = jobs.queue AND m.paused)
RETURNING *
