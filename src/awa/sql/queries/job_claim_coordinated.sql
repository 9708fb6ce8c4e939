-- job_claim_coordinated: claim up to %(limit)s jobs of a queue under fleet limits or in
-- the fleet pool (CONTRACT §8–§9, ADR 0010). awa.claim_coordinated (migration 0003) takes
-- the pool's and the queue's claim locks, counts what the fleet runs, spends rate
-- tokens and claims in one round trip. Job rows come back like job_claim_available's;
-- when the fleet held the claim back, a last row with a NULL id says why (blocked) and,
-- for a rate limit, how long until the next token (retry_in_ms).
SELECT * FROM awa.claim_coordinated(
    %(queue)s::text, %(limit)s::integer, %(deadline_ms)s::bigint, %(synchronous_commit)s::text
)
