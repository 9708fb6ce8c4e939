-- role_may_record_outcomes: whether this role may run what a worker's completions call
-- besides awa.complete_and_claim: the outcomes' count of finished jobs (migration 0038),
-- not PUBLIC's. Asked once at start: without it every completion would fail and retry.
SELECT has_function_privilege(
    'awa.count_finished_outcomes(text[], awa.job_state[], timestamptz[], bigint[])', 'EXECUTE'
)
