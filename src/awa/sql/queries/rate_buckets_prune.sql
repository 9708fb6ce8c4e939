-- rate_buckets_prune: forget a batch of fleet rate buckets that have refilled to their
-- burst. A claim counts a missing bucket as full (ADR 0010), so a full one says nothing;
-- without this a partitioned queue kept a row for every key it ever saw. A bucket a claim
-- spends meanwhile is locked by that claim and re-checked after it (its tokens then below
-- the burst): it stays.
-- Fenced: does nothing unless the given epoch is still the leader lease's (ADR 0019).
DELETE FROM awa.queue_rate_buckets AS b
USING awa.queue_limits AS l
WHERE l.queue = b.queue AND l.rate_limit IS NOT NULL
  AND b.tokens + l.rate_limit * extract(epoch FROM now() - b.refilled_at)
      >= coalesce(l.burst, ceil(l.rate_limit))
  AND (b.queue, b.partition_key) IN (
      SELECT f.queue, f.partition_key
      FROM awa.queue_rate_buckets AS f
      JOIN awa.queue_limits AS fl ON fl.queue = f.queue AND fl.rate_limit IS NOT NULL
      WHERE (SELECT awa.leader_holds(%(epoch)s::bigint))
        AND f.tokens + fl.rate_limit * extract(epoch FROM now() - f.refilled_at)
            >= coalesce(fl.burst, ceil(fl.rate_limit))
      LIMIT %(limit)s)
