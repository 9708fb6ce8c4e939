-- schema_clean: awa.testing.clean() — delete every row of awa's tables (jobs, the dead
-- letter queue, queue control rows, fleet limits and their rate buckets, the fleet pool,
-- cron schedules, runtime instances, batch operations and, by cascade, their items) so
-- each test starts empty; the schema and its version stay. DELETE, not TRUNCATE: no ACCESS EXCLUSIVE lock, so a worker still connected
-- elsewhere is not blocked. Data-modifying CTEs run whether or not the final SELECT reads
-- them. Returns how many jobs were deleted.
WITH jobs AS (DELETE FROM awa.jobs RETURNING 1),
     dead AS (DELETE FROM awa.dlq RETURNING 1),
     meta AS (DELETE FROM awa.queue_meta RETURNING 1),
     cron AS (DELETE FROM awa.cron_schedules RETURNING 1),
     instances AS (DELETE FROM awa.runtime_instances RETURNING 1),
     batches AS (DELETE FROM awa.batch_operations RETURNING 1),
     limits AS (DELETE FROM awa.queue_limits RETURNING 1),
     buckets AS (DELETE FROM awa.queue_rate_buckets RETURNING 1),
     members AS (DELETE FROM awa.fleet_pool_members RETURNING 1),
     pool AS (DELETE FROM awa.fleet_pool RETURNING 1)
SELECT (SELECT count(*) FROM jobs) AS jobs
