-- fleet_pool_get: the fleet pool with, per member, its settings and what the fleet runs
-- now (jobs_running_idx). No row: no pool.
SELECT p.total, p.updated_at,
    coalesce((
        SELECT jsonb_agg(jsonb_build_object(
            'queue', m.queue, 'min_workers', m.min_workers, 'weight', m.weight,
            'running', (SELECT count(*) FROM awa.jobs AS r
                        WHERE r.queue = m.queue AND r.state = 'running'))
            ORDER BY m.queue)
        FROM awa.fleet_pool_members AS m
    ), '[]'::jsonb) AS members
FROM awa.fleet_pool AS p
