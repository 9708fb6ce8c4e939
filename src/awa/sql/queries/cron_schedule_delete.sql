-- cron_schedule_delete: forget a schedule. A worker that still registers it in code puts
-- it back at its next start.
DELETE FROM awa.cron_schedules WHERE name = %(name)s RETURNING name
