-- insert_savepoint_release: the unique insert went in; the savepoint is no longer needed.
RELEASE SAVEPOINT awa_insert
