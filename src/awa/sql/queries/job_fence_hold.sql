-- job_fence_hold: the jobs a shutdown just fenced back to retryable wait %(hold_s)s
-- seconds before another worker may claim them: their handlers are still running in this
-- process until it exits, and a retry started elsewhere meanwhile ran the job twice at
-- once (a review). Same transaction as job_fence_attempts; job_fence_release lets the
-- jobs whose handlers did stop go at once.
UPDATE awa.jobs
SET run_at = now() + make_interval(secs => %(hold_s)s)
WHERE id = ANY (%(ids)s::bigint[]) AND state = 'retryable'
