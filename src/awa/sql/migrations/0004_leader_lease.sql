-- 0004: the maintenance leader holds a lease in the database (ADR 0019).
-- Forward-only: never edit a shipped migration; add the next number instead.

-- One row. A worker leads while expires_at (the server's clock) is ahead and it keeps
-- renewing; a frozen or partitioned leader stops renewing and loses it. Every
-- acquisition bumps epoch, and every maintenance statement runs only while its epoch is
-- still the lease's (awa.leader_holds), so a former leader that wakes up cannot act.
-- epoch is a key on purpose: a fenced statement locks the row FOR KEY SHARE, which blocks
-- taking the lease (an UPDATE of the key) until that statement commits, but not renewing
-- it (an UPDATE of expires_at only).
CREATE TABLE awa.leader_lease (
    id          smallint PRIMARY KEY DEFAULT 1 CHECK (id = 1),
    epoch       bigint NOT NULL UNIQUE,
    holder      text,          -- the leading worker's instance id
    holder_pid  integer,       -- its lease connection's backend: gone means it crashed
    acquired_at timestamptz,
    expires_at  timestamptz NOT NULL
);
INSERT INTO awa.leader_lease (epoch, expires_at) VALUES (0, '-infinity');

-- True while the lease is still at epoch p_epoch and unexpired; locks the lease row
-- FOR KEY SHARE until the calling statement's transaction ends. Maintenance statements
-- call it as an uncorrelated scalar subquery, so it runs once, before any row changes.
CREATE FUNCTION awa.leader_holds(p_epoch bigint) RETURNS boolean
LANGUAGE sql VOLATILE AS $$
    SELECT EXISTS (
        SELECT FROM awa.leader_lease
        WHERE epoch = p_epoch AND expires_at > clock_timestamp()
        FOR KEY SHARE
    )
$$;
