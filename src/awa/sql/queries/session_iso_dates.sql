-- session_iso_dates: dates and times written in ISO 8601, whatever the server, database
-- or role sets. psycopg reads timestamps sent as text only in the ISO style: under
-- another DateStyle (SQL, DMY for one) every statement returning a time raised after it
-- had run, so an insert committed yet failed, and a claim took jobs it never started.
-- Only the output style changes: the day/month order awa never relies on stays. Behind
-- PgBouncer, which follows DateStyle for each client, it holds on every server
-- connection.
SET DateStyle = 'ISO'
