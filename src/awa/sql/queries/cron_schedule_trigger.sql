-- cron_schedule_trigger: enqueue one job of a schedule now, outside its timetable. The
-- schedule's last_fire_at is left alone, so its next regular fire still happens.
WITH inserted AS (
INSERT INTO awa.jobs (
    kind, queue, args, state, priority, original_priority, max_attempts, tags, metadata, run_at
)
SELECT s.kind, s.queue, s.args, 'available', s.priority, s.priority, s.max_attempts, s.tags,
    s.metadata || jsonb_build_object('cron_name', s.name, 'cron_triggered_at', now()), now()
FROM awa.cron_schedules AS s
WHERE s.name = %(name)s
RETURNING *
)
SELECT i.*, pg_notify('awa_available', i.queue) AS notified FROM inserted AS i
