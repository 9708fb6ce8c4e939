-- wal_positions: how far the server has inserted and flushed its WAL, and its last checkpoint.
-- The completer's durability check (worker/durability.py) reads it once per poll for every
-- batch of outcomes waiting for their lifecycle hooks: a batch committed before this was
-- read is on disk once the flush position passes this insert position. LSNs as byte
-- offsets (numeric): comparable in Python. Crash recovery always ends with a checkpoint,
-- so a new checkpoint tells that positions read before it may mean nothing (a crash can
-- discard WAL that was inserted but not written, and new WAL then reuses those positions).
-- server_run names this run of the server: a restart changes the postmaster's start time,
-- and a crash's reset (the postmaster stays, every other process restarts) discards the
-- statistics, which stamps pg_stat_bgwriter.stats_reset anew (PostgreSQL 15 and 18 alike;
-- a hand-made reset of those statistics reads as a crash: only looked up, nothing lost).
-- A checkpoint within one run was routine: it loses nothing.
SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn AS insert_lsn,
       pg_current_wal_flush_lsn() - '0/0'::pg_lsn AS flush_lsn,
       (pg_control_checkpoint()).redo_lsn - '0/0'::pg_lsn AS checkpoint_lsn,
       pg_postmaster_start_time()::text || ' '
           || coalesce((SELECT stats_reset FROM pg_stat_bgwriter)::text, '') AS server_run
