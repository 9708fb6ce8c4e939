-- job_unique_holder: the job whose unique key refused an insert (UniqueConflict): the row
-- with that key in one of its own guarded states, in awa.jobs or else in the DLQ
-- (awa.unique_key_holder, migration 0031: SECURITY DEFINER, so a producer-only role's
-- look-up cannot fail and abort its transaction). NULL when it has moved on since
-- (finished, purged, or left its guarded states).
SELECT awa.unique_key_holder(%(unique_key)s::bytea)
