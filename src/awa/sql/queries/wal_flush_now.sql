-- wal_flush_now: make every commit so far durable, in one round trip (used at shutdown so
-- the last outcomes' hooks fire). A transactional logical message is the cheapest write
-- any role may make: it gives this statement's transaction WAL and a commit record, and
-- committing synchronously flushes the WAL up to there — past every earlier commit,
-- asynchronous ones included. (Taking an xid alone writes no WAL and would not flush.)
SELECT set_config('synchronous_commit', 'on', true), pg_logical_emit_message(true, 'awa', 'flush')
