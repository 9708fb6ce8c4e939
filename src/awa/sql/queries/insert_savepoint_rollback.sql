-- insert_savepoint_rollback: the unique insert failed; the caller's transaction is as
-- it was before it, and usable again.
ROLLBACK TO SAVEPOINT awa_insert
