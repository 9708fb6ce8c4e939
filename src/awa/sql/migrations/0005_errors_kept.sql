-- 0005: a job keeps its last 20 error entries (ADR 0020).
-- Forward-only: never edit a shipped migration; add the next number instead.

-- errors || entries, then only the last 20: a job with max_attempts = 1000 and a long
-- error message on each attempt made rows (and every read of them) grow without bound.
-- The worker cuts each message to 4 000 characters before it gets here. jsonpath's lax
-- mode makes "last - 19" before the start of a short array simply start at the start.
CREATE FUNCTION awa.errors_append(errors jsonb, entries jsonb) RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT jsonb_path_query_array(errors || entries, '$[last - 19 to last]')
$$;
