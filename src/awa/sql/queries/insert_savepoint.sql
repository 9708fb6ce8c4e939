-- insert_savepoint: before a unique insert inside a caller's transaction, so that its
-- UniqueConflict can be caught and the transaction goes on (client/insert.py, bridge.py).
SAVEPOINT awa_insert
