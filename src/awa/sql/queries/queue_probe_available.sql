-- queue_probe_available: which of a worker's idle queues have jobs to claim, in ONE
-- statement per poll interval for all of them (ADR 0011), instead of one claim per idle
-- queue: a worker serving a thousand idle queues sends a handful of statements a second.
-- Three index probes per queue (an available job sits in jobs_claim_idx, jobs_ordered_idx
-- when it has an ordering key, or, adopted by a partitioned queue, jobs_partition_idx). An
-- ordered job waiting for its key's turn counts as available here: the claim that follows
-- finds nothing, which costs one claim per poll interval, not a busy loop. Paused queues are left out: resuming one
-- sends a control notice that wakes its dispatchers.
-- Each probe is a scalar subquery in its index's order with LIMIT 1, not EXISTS: once
-- most rows are available (a backlog in another queue), EXISTS was planned as a
-- sequential scan of the whole table per idle queue (ADR 0040).
SELECT q.queue
FROM unnest(%(queues)s::text[]) AS q(queue)
WHERE (
    (SELECT j.id FROM awa.jobs AS j
     WHERE j.state = 'available' AND j.queue = q.queue AND j.partition_key IS NULL
       AND j.ordering_key IS NULL
     ORDER BY j.priority, j.run_at, j.id LIMIT 1) IS NOT NULL
    OR (SELECT j.id FROM awa.jobs AS j
        WHERE j.state = 'available' AND j.queue = q.queue AND j.partition_key IS NULL
          AND j.ordering_key IS NOT NULL
        ORDER BY j.priority, j.run_at, j.id LIMIT 1) IS NOT NULL
    OR (SELECT j.id FROM awa.jobs AS j
        WHERE j.state = 'available' AND j.queue = q.queue AND j.partition_key IS NOT NULL
        ORDER BY j.partition_key, j.priority, j.run_at, j.id LIMIT 1) IS NOT NULL
)
AND NOT EXISTS (SELECT 1 FROM awa.queue_meta AS m WHERE m.queue = q.queue AND m.paused)
