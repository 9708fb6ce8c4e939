-- 0032: a schedule whose expression or time zone changes starts its timetable then, for
-- every writer.
-- Forward-only: never edit a shipped migration; add the next number instead.
--
-- A new expression was evaluated from the old one's last fire, so a deploy changing a
-- yearly schedule to a per-second one enqueued a job per second since. The upsert of the
-- previous release moved last_fire_at itself, but only that statement did: a pod of an
-- older release (a rolling deploy, a rollback) or a hand-written UPDATE still left it
-- behind (a review). A BEFORE UPDATE trigger moves it for any writer, as a resume does:
-- fires the new definition would have had while the old one was in force were never due.
-- The move also fences a leader's tick computed from the old definition (its fire
-- compares last_fire_at). Written to apply again over itself.

CREATE OR REPLACE FUNCTION awa.cron_timetable_restarts() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF (NEW.cron_expr, NEW.timezone) IS DISTINCT FROM (OLD.cron_expr, OLD.timezone) THEN
        NEW.last_fire_at := greatest(NEW.last_fire_at, now());
    END IF;
    RETURN NEW;
END
$$;

DROP TRIGGER IF EXISTS cron_schedules_timetable_restarts ON awa.cron_schedules;
CREATE TRIGGER cron_schedules_timetable_restarts
    BEFORE UPDATE OF cron_expr, timezone ON awa.cron_schedules
    FOR EACH ROW
    EXECUTE FUNCTION awa.cron_timetable_restarts();
