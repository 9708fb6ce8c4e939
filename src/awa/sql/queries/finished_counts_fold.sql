-- finished_counts_fold: the leader folds the finished jobs' appended count changes into
-- their counts and coarsens aged buckets (migration 0038, ADR 0054); returns how many
-- change rows it folded. Safe beside another fold or any write of awa.jobs.
SELECT awa.fold_finished_counts()
