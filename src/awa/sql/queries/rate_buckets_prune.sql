-- rate_buckets_prune: forget a batch of fleet rate buckets that have refilled to their
-- burst. A claim counts a missing bucket as full (ADR 0010), so a full one says nothing;
-- without this a partitioned queue kept a row for every key it ever saw. The batch is
-- locked in key order, skipping buckets a claim holds (the claim spends them in an order
-- of its own: waiting for each other's rows, the two deadlocked); a bucket spent since
-- the scan is re-checked once locked, found below its burst, and kept.
-- Fenced: does nothing unless the given epoch is still the leader lease's (ADR 0019).
WITH refilled AS (
    SELECT b.queue, b.partition_key
    FROM awa.queue_rate_buckets AS b
    JOIN awa.queue_limits AS l ON l.queue = b.queue AND l.rate_limit IS NOT NULL
    WHERE (SELECT awa.leader_holds(%(epoch)s::bigint))
      AND b.tokens + l.rate_limit * extract(epoch FROM now() - b.refilled_at)
          >= coalesce(l.burst, ceil(l.rate_limit))
    ORDER BY b.queue, b.partition_key
    LIMIT %(limit)s
    FOR UPDATE OF b SKIP LOCKED
)
DELETE FROM awa.queue_rate_buckets AS b
USING refilled AS r
WHERE b.queue = r.queue AND b.partition_key = r.partition_key
