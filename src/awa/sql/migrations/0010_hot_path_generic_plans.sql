-- 0010: the hot path's functions keep one plan per statement instead of planning each
-- call afresh (ADR 0036).
-- Forward-only: never edit a shipped migration; add the next number instead.
--
-- PL/pgSQL caches a plan per statement, but a statement with parameters (the queue, the
-- limit, the outcomes) is planned anew for its first five runs and then only kept generic
-- when the generic plan's estimate is no worse than the custom ones'. The claim's
-- ``LIMIT p_limit`` makes the generic estimate look worse, so every claim and every
-- completion was planned again: perf of a 4-process drain put 8 % of the server's CPU in
-- GetCachedPlan and the planner under it. Every statement of these functions reaches its
-- rows through a partial index or the primary key whatever the parameters, so the
-- generic plan is the plan a custom one would pick (checked with EXPLAIN EXECUTE under
-- force_generic_plan). The setting holds for the functions they call (claim_coordinated,
-- pool_room, ordering_pick) while they run, and nowhere else.
--
-- A later migration that restates one of these functions with CREATE OR REPLACE must
-- repeat the SET clause: a replaced function keeps only the settings of its new text.

ALTER FUNCTION awa.claim(text, integer, bigint, text)
    SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION awa.complete_and_claim(jsonb, text, jsonb)
    SET plan_cache_mode = force_generic_plan;
