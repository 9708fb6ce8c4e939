-- cron_schedule_upsert: store the schedules a worker registered, at its start. The
-- definition follows the code; paused and last_fire_at belong to the fleet and survive
-- redeploys. updated_at moves only when the definition really changed. One statement
-- for all of a worker's schedules: a JSON array of definitions. A new expression or time
-- zone starts its timetable now: a trigger moves last_fire_at up (migration 0032).
-- Returns the definitions it replaced, as they were (the CTE reads the rows before the
-- statement's own write): two services registering one name take the schedule from each
-- other at every start, and the worker says so.
WITH d AS (
    SELECT * FROM jsonb_to_recordset(%(schedules)s::jsonb) AS d(
        name text, cron_expr text, timezone text, kind text, queue text, args jsonb,
        priority smallint, max_attempts integer, tags jsonb, metadata jsonb,
        missed_fire_policy text
    )
), before AS (
    SELECT s.name, s.cron_expr, s.timezone, s.kind, s.queue, s.args, s.priority,
        s.max_attempts, s.tags, s.metadata, s.missed_fire_policy
    FROM awa.cron_schedules AS s JOIN d USING (name)
), written AS (
    INSERT INTO awa.cron_schedules AS s (
        name, cron_expr, timezone, kind, queue, args, priority, max_attempts, tags, metadata,
        missed_fire_policy
    )
    SELECT d.name, d.cron_expr, d.timezone, d.kind, d.queue, d.args, d.priority,
        d.max_attempts, ARRAY(SELECT jsonb_array_elements_text(d.tags)), d.metadata,
        d.missed_fire_policy
    FROM d
    ON CONFLICT (name) DO UPDATE
    SET cron_expr = EXCLUDED.cron_expr, timezone = EXCLUDED.timezone, kind = EXCLUDED.kind,
        queue = EXCLUDED.queue, args = EXCLUDED.args, priority = EXCLUDED.priority,
        max_attempts = EXCLUDED.max_attempts, tags = EXCLUDED.tags,
        metadata = EXCLUDED.metadata, missed_fire_policy = EXCLUDED.missed_fire_policy,
        updated_at = now()
    WHERE (s.cron_expr, s.timezone, s.kind, s.queue, s.args, s.priority, s.max_attempts,
           s.tags, s.metadata, s.missed_fire_policy)
        IS DISTINCT FROM
          (EXCLUDED.cron_expr, EXCLUDED.timezone, EXCLUDED.kind, EXCLUDED.queue,
           EXCLUDED.args, EXCLUDED.priority, EXCLUDED.max_attempts, EXCLUDED.tags,
           EXCLUDED.metadata, EXCLUDED.missed_fire_policy)
    RETURNING s.name
)
SELECT b.name, b.cron_expr, b.timezone, b.kind, b.queue, b.args, b.priority,
    b.max_attempts, b.tags, b.metadata, b.missed_fire_policy
FROM before AS b JOIN written AS w USING (name)
ORDER BY b.name
