-- 0021: a role that may read the handoff seats but not park them (docs/security.md's
-- producer) reads only the two columns a single insert's probe needs (ADR 0045, amended).
-- Forward-only: never edit a shipped migration; add the next number instead.
--
-- Every seat row names its worker's notice channel. Anyone who knows it can NOTIFY there,
-- and a worker took such a notice for a job handed over to it: a producer could have any
-- registered handler run with args of its choosing, on a paused queue, or a running job's
-- lease copied to finish that job its way (found in session 24's review). Workers now
-- refuse a notice for a seat they did not park; this keeps the channels and seat ids
-- from all but the workers. Grants made by the migrating role (as docs/security.md
-- does) are narrowed: SELECT on the table becomes SELECT (queue, job_id) for every role
-- that cannot INSERT seats. A workers' role keeps what it had.
DO $$
DECLARE
    grantee text;
BEGIN
    FOR grantee IN
        SELECT DISTINCT CASE WHEN a.grantee = 0 THEN 'PUBLIC'
                             ELSE quote_ident(pg_get_userbyid(a.grantee)) END
        FROM pg_class AS c CROSS JOIN LATERAL aclexplode(c.relacl) AS a
        WHERE c.oid = 'awa.handoff_seats'::regclass
          AND a.privilege_type = 'SELECT' AND a.grantee <> c.relowner
          AND NOT EXISTS (
              SELECT FROM aclexplode(c.relacl) AS w
              WHERE w.grantee = a.grantee AND w.privilege_type = 'INSERT')
    LOOP
        EXECUTE 'REVOKE SELECT ON awa.handoff_seats FROM ' || grantee;
        EXECUTE 'GRANT SELECT (queue, job_id) ON awa.handoff_seats TO ' || grantee;
    END LOOP;
END
$$;
