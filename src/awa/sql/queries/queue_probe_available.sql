-- queue_probe_available: which of a worker's idle queues have jobs to claim, in ONE
-- statement per poll interval for all of them (ADR 0011), instead of one claim per idle
-- queue: a worker serving a thousand idle queues sends a handful of statements a second.
-- Two index probes per queue (an available job sits in jobs_claim_idx or, adopted by a
-- partitioned queue, in jobs_partition_idx). Paused queues are left out: resuming one
-- sends a control notice that wakes its dispatchers.
SELECT q.queue
FROM unnest(%(queues)s::text[]) AS q(queue)
WHERE (
    EXISTS (SELECT 1 FROM awa.jobs AS j
            WHERE j.state = 'available' AND j.queue = q.queue AND j.partition_key IS NULL)
    OR EXISTS (SELECT 1 FROM awa.jobs AS j
               WHERE j.state = 'available' AND j.queue = q.queue
                 AND j.partition_key IS NOT NULL)
)
AND NOT EXISTS (SELECT 1 FROM awa.queue_meta AS m WHERE m.queue = q.queue AND m.paused)
