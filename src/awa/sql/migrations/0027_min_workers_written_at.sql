-- 0027: when a queue's min_workers override was last changed, apart from when any of its
-- overrides was written. Workers take conflicting min_workers overrides (together over
-- global_max_workers) in the order they were written (session 25), and a whole-state write
-- that re-states an unchanged min_workers to tune another setting must not move that
-- queue's minimum behind one refused meanwhile: overrides_updated_at, stamped on every
-- write, would.
ALTER TABLE awa.queue_meta ADD COLUMN IF NOT EXISTS override_min_workers_at timestamptz;
UPDATE awa.queue_meta
SET override_min_workers_at = overrides_updated_at
WHERE override_min_workers IS NOT NULL AND override_min_workers_at IS NULL;
