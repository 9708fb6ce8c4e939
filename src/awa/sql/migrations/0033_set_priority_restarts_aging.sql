-- 0033: an operator's new priority restarts the job's aging.
-- Forward-only: never edit a shipped migration; add the next number instead.
--
-- Aging counts a waiting job's levels from run_at. A batch SetPriority moves both
-- priority and original_priority, but a backlog that had waited N intervals was aged
-- straight back at the next tick: a demotion to 4 of jobs waiting three minutes undone
-- within a second (a review). aging_from marks when an operator last set the priority;
-- aging counts from greatest(run_at, aging_from), so a later wait (a retry, a snooze, a
-- new run_at) still ages from its own start and nothing needs to clear it. NULL for every
-- job no batch touched: adding the column rewrites nothing. Written to apply again over
-- itself.

ALTER TABLE awa.jobs ADD COLUMN IF NOT EXISTS aging_from timestamptz;
