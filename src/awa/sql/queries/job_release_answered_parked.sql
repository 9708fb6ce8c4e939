-- job_release_answered_parked: a job parked (its handler returned WaitForCallback) after its
-- callback was already answered — resume_external reached the running job first, cleared
-- the id and stored the payload — has no id left to answer and no timeout: nothing else
-- would ever move it. It becomes available with the payload in metadata.callback_payload,
-- as a resume of a parked job makes it. Run by the maintenance leader with the callback
-- timeouts. Expects jobs_waiting_external_idx (their callback_timeout_at is NULL).
-- Fenced: does nothing unless the given epoch is still the leader lease's (ADR 0019).
WITH answered AS (
    SELECT id FROM awa.jobs
    WHERE state = 'waiting_external' AND callback_timeout_at IS NULL AND callback_id IS NULL
      AND (SELECT awa.leader_holds(%(epoch)s::bigint))
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), released AS (
    UPDATE awa.jobs AS j
    SET state = 'available', run_at = now(), partition_key = NULL, heartbeat_at = NULL,
        priority = j.original_priority,
        -- given back, as resume_external gives a parked job's: the run after the answer
        -- goes on as the same attempt (this path spent one: attempt 4 of 2, a review)
        attempt = greatest(j.attempt - 1, 0)
    FROM answered
    WHERE j.id = answered.id
    RETURNING j.id, j.queue, j.kind, j.state
)
SELECT r.id, r.queue, r.kind, r.state, pg_notify('awa_available', r.queue) AS notified
FROM released AS r
