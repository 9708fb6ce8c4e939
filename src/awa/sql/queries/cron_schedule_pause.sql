-- cron_schedule_pause: stop firing a schedule (the leader skips paused rows).
UPDATE awa.cron_schedules SET paused = true, updated_at = now()
WHERE name = %(name)s
RETURNING *
