-- 0023: a stored rate override is a finite number of jobs per second. The column's check
-- (> 0) let 'NaN' and 'Infinity' in through hand-written SQL; a worker could not make a
-- token bucket of them (its start failed, its live refresh stopped for every queue).
-- Such a value overrode nothing a worker could apply, so it is cleared here, then kept out.
UPDATE awa.queue_meta
SET override_rate_limit = NULL
WHERE override_rate_limit = 'NaN'::double precision
   OR override_rate_limit = 'Infinity'::double precision;

ALTER TABLE awa.queue_meta
    ADD CONSTRAINT queue_meta_override_rate_limit_finite
    CHECK (override_rate_limit < 'Infinity'::double precision);
