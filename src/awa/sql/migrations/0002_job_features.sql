-- 0002: job features — periodic schedules, the dead letter queue, external callbacks.
-- Forward-only: never edit a shipped migration; add the next number instead.

-- Periodic (cron) schedules. One row per schedule name; the maintenance leader fires a
-- schedule by a compare-and-set on last_fire_at in the same statement that inserts the
-- job, so each fire time is enqueued exactly once across the fleet, even when two
-- processes briefly both believe they lead.
CREATE TABLE awa.cron_schedules (
    name               text PRIMARY KEY CHECK (char_length(name) BETWEEN 1 AND 200),
    cron_expr          text NOT NULL,
    timezone           text NOT NULL DEFAULT 'UTC',
    kind               text NOT NULL CHECK (char_length(kind) BETWEEN 1 AND 200),
    queue              text NOT NULL CHECK (char_length(queue) BETWEEN 1 AND 200),
    args               jsonb NOT NULL DEFAULT '{}',
    priority           smallint NOT NULL DEFAULT 2 CHECK (priority BETWEEN 1 AND 4),
    max_attempts       integer NOT NULL DEFAULT 25 CHECK (max_attempts BETWEEN 1 AND 1000),
    tags               text[] NOT NULL DEFAULT '{}',
    metadata           jsonb NOT NULL DEFAULT '{}',
    missed_fire_policy text NOT NULL DEFAULT 'coalesce'
        CHECK (missed_fire_policy IN ('coalesce', 'catch_up')),
    paused             boolean NOT NULL DEFAULT false,
    last_fire_at       timestamptz,
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now()
);

-- Dead letter queue opt-in per queue (set by workers at start from QueueConfig.dlq).
ALTER TABLE awa.queue_meta ADD COLUMN dlq boolean NOT NULL DEFAULT false;

-- The dead letter queue: the jobs columns, plus why and when the job was moved.
-- A later migration that adds a column to awa.jobs must add it here and to
-- awa.move_failed_to_dlq() as well.
CREATE TABLE awa.dlq (LIKE awa.jobs INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
ALTER TABLE awa.dlq
    ADD PRIMARY KEY (id),
    ADD COLUMN reason text NOT NULL DEFAULT 'failed',
    ADD COLUMN dlq_at timestamptz NOT NULL DEFAULT now();
CREATE INDEX dlq_kind_idx ON awa.dlq (kind);
CREATE INDEX dlq_queue_idx ON awa.dlq (queue);
CREATE INDEX dlq_at_idx ON awa.dlq (dlq_at);

-- Move a job that just failed on a DLQ-enabled queue into awa.dlq, in the transaction of
-- the statement that failed it (finalize, rescue, shutdown fence, callback timeout,
-- fail_external). A row trigger whose WHEN clause only passes on the transition into
-- 'failed': every other update of the hot path (claim, heartbeat, completion) skips the
-- function call entirely. The RETURNING of the failing statement is computed before
-- AFTER triggers run, so the completer still sees the outcome as applied.
CREATE FUNCTION awa.move_failed_to_dlq() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM awa.queue_meta WHERE queue = NEW.queue AND dlq) THEN
        RETURN NULL;
    END IF;
    INSERT INTO awa.dlq (
        id, kind, queue, args, state, priority, original_priority, attempt, max_attempts,
        run_lease, tags, metadata, progress, errors, created_at, run_at, attempted_at,
        heartbeat_at, deadline_at, finalized_at, unique_key, unique_states, callback_id,
        callback_timeout_at, reason, dlq_at
    ) VALUES (
        NEW.id, NEW.kind, NEW.queue, NEW.args, NEW.state, NEW.priority,
        NEW.original_priority, NEW.attempt, NEW.max_attempts, NEW.run_lease, NEW.tags,
        NEW.metadata, NEW.progress, NEW.errors, NEW.created_at, NEW.run_at,
        NEW.attempted_at, NEW.heartbeat_at, NEW.deadline_at, NEW.finalized_at,
        NEW.unique_key, NEW.unique_states, NULL, NULL,
        coalesce(NEW.errors -> -1 ->> 'error', 'failed'), now()
    );
    DELETE FROM awa.jobs WHERE id = NEW.id;
    RETURN NULL;
END
$$;

CREATE TRIGGER jobs_move_failed_to_dlq
    AFTER UPDATE OF state ON awa.jobs
    FOR EACH ROW
    WHEN (NEW.state = 'failed' AND OLD.state IS DISTINCT FROM 'failed')
    EXECUTE FUNCTION awa.move_failed_to_dlq();

-- External callbacks: a token resolves to at most one job; the leader times out parked
-- jobs whose callback_timeout_at passed.
CREATE UNIQUE INDEX jobs_callback_idx ON awa.jobs (callback_id) WHERE callback_id IS NOT NULL;
CREATE INDEX jobs_waiting_external_idx ON awa.jobs (callback_timeout_at)
    WHERE state = 'waiting_external';
