-- cron_schedule_list: every schedule (a small table: one row per schedule name), or one.
SELECT * FROM awa.cron_schedules
WHERE %(name)s::text IS NULL OR name = %(name)s::text
ORDER BY name
