-- job_discard_failed: delete failed jobs of one kind; returns how many went.
-- Locked in id order first, as job_retry_failed (ADR 0050).
WITH doomed AS (
    SELECT id FROM awa.jobs WHERE state = 'failed' AND kind = %(kind)s ORDER BY id FOR UPDATE
)
DELETE FROM awa.jobs
WHERE state = 'failed' AND kind = %(kind)s
  AND (SELECT count(*) FROM doomed) >= 0  -- a gate the delete passes once
