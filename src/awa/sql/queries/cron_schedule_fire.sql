-- cron_schedule_fire: enqueue the due fires of one schedule and advance last_fire_at, in
-- ONE statement (so in one transaction). The compare-and-set on last_fire_at — it must
-- still hold the value the leader read — makes each fire exactly-once across the fleet:
-- when two processes evaluate the same schedule at once (a leader failover, a stalled old
-- leader), one moves it forward and inserts the jobs, the other updates no row and so
-- inserts nothing. Fire times come from the cron expression, never from a clock, so both
-- compute the same ones. The statement wakes the queue.
-- Fenced: does nothing unless the given epoch is still the leader lease's (ADR 0019).
WITH advanced AS (
    UPDATE awa.cron_schedules
    SET last_fire_at = %(last_fire_at)s::timestamptz
    WHERE name = %(name)s AND NOT paused
      AND last_fire_at IS NOT DISTINCT FROM %(previous)s::timestamptz
      AND (SELECT awa.leader_holds(%(epoch)s::bigint))
    RETURNING *
), inserted AS (
INSERT INTO awa.jobs (
    kind, queue, args, state, priority, original_priority, max_attempts, tags, metadata, run_at
)
SELECT a.kind, a.queue, a.args, 'available', a.priority, a.priority, a.max_attempts, a.tags,
    a.metadata || jsonb_build_object('cron_name', a.name, 'cron_fire_at', f.fire_at),
    now()
FROM advanced AS a
CROSS JOIN unnest(%(fire_times)s::timestamptz[]) WITH ORDINALITY AS f(fire_at, n)
ORDER BY f.n
RETURNING id, queue
)
SELECT id, pg_notify('awa_available', queue) AS notified FROM inserted
