-- job_callback_state: what a handler waiting for its callback polls (on a wake-up notice,
-- or on a backoff up to a couple of seconds): the row's state, attempt and callback, the
-- payload a resume_external stored, and whether the callback's timeout has passed (by the
-- database's clock, as heartbeat_callback sets it). One primary-key read; no write.
SELECT state, run_lease, attempted_at, callback_id,
       metadata -> 'callback_payload' AS payload,
       coalesce(callback_timeout_at < now(), false) AS expired
FROM awa.jobs
WHERE id = %(id)s
