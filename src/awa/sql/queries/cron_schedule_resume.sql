-- cron_schedule_resume: fire again from now on. Fires missed while paused are skipped:
-- last_fire_at moves up to now(), whatever the schedule's missed-fire policy.
UPDATE awa.cron_schedules
SET paused = false, updated_at = now(),
    last_fire_at = CASE WHEN paused THEN greatest(last_fire_at, now()) ELSE last_fire_at END
WHERE name = %(name)s
RETURNING *
