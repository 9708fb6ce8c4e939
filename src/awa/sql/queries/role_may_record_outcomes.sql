-- role_may_record_outcomes: whether this role may run what a worker calls besides
-- awa.complete_and_claim: the outcomes' count of finished jobs and, as the maintenance
-- leader, the fold (migration 0038), neither PUBLIC's. Asked once at start: without the
-- first every completion would fail and retry, without the second every fold.
SELECT has_function_privilege(
        'awa.count_finished_outcomes(text[], awa.job_state[], timestamptz[], bigint[])',
        'EXECUTE')
    AND has_function_privilege('awa.fold_finished_counts()', 'EXECUTE')
