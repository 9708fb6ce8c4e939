-- runtime_instance_list: workers seen within %(fresh_ms)s, the most recently seen first.
-- is_leader: whether the worker holds the leader lease now, from the lease itself. What
-- a worker published lags: a leader that died kept saying so for as long as its row was
-- fresh, beside the one that took over (two leaders listed for up to a minute), and a new
-- leader's snapshot from just before its election said no for up to 10 s.
-- seen_ago_s: the age of last_seen_at by the database's clock (a viewer's own clock may
-- be minutes off the one the workers' rows were stamped by).
SELECT i.instance_id, i.hostname, i.pid, i.started_at, i.last_seen_at,
    greatest(extract(epoch FROM now() - i.last_seen_at), 0)::float8 AS seen_ago_s,
    coalesce(l.holder = i.instance_id::text AND l.expires_at > now(), false) AS is_leader,
    i.snapshot
FROM awa.runtime_instances AS i
LEFT JOIN awa.leader_lease AS l ON true
WHERE i.last_seen_at > now() - %(fresh_ms)s::bigint * interval '1 millisecond'
ORDER BY i.last_seen_at DESC
