-- job_unique_holder: the job whose unique key refused an insert (UniqueConflict): the row
-- with that key in one of its own guarded states, on jobs_unique_idx. None when it has
-- moved on since (finished, or left its guarded states).
SELECT id FROM awa.jobs
WHERE unique_key = %(unique_key)s AND awa.job_state_in_bitmask(unique_states, state)
LIMIT 1
