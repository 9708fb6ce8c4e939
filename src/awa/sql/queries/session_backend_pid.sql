-- session_backend_pid: the pid of the server process that runs this statement. Compared
-- with the pid the connection was given at startup, it tells a direct connection (the
-- same) from one through a pooler such as PgBouncer (a pooler hands out its own): awa
-- then uses no session state there — no prepared statements, no LISTEN.
SELECT pg_backend_pid()
