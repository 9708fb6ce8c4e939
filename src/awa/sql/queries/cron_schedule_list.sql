-- cron_schedule_list: every schedule (a small table: one row per schedule name), or one,
-- with the database's clock (db_now): fire times and the next fire are reckoned by it, never
-- by the clock of the host that reads them (hosts' clocks drift apart).
SELECT *, now() AS db_now FROM awa.cron_schedules
WHERE %(name)s::text IS NULL OR name = %(name)s::text
ORDER BY name
