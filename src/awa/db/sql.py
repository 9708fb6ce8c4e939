"""The SQL statements of awa, each loaded once from ``awa/sql/queries/<name>.sql``.

Every statement lives in its own file with a header saying why its shape matters; this
module only names them, so a grep for a constant finds each caller. A test checks that
every file is named here and every name has a file.
"""

from __future__ import annotations

from importlib import resources
from typing import LiteralString


def load(name: str) -> LiteralString:
    """The text of ``awa/sql/queries/<name>.sql``."""
    # Our own package data, never user input: safe to treat as a literal query.
    return resources.files("awa.sql.queries").joinpath(f"{name}.sql").read_text("utf-8")


# Producing
JOB_INSERT = load("job_insert")
JOB_RESERVE_IDS = load("job_reserve_ids")
JOB_COPY_IN = load("job_copy_in")

# Admin
JOB_GET = load("job_get")
JOB_LIST = load("job_list")
JOB_CANCEL = load("job_cancel")
JOB_CANCEL_BY_UNIQUE_KEY = load("job_cancel_by_unique_key")
JOB_RETRY = load("job_retry")
JOB_RETRY_FAILED = load("job_retry_failed")
JOB_DISCARD_FAILED = load("job_discard_failed")
QUEUE_DRAIN = load("queue_drain")
QUEUE_STATS = load("queue_stats")
QUEUE_META_PAUSE = load("queue_meta_pause")
QUEUE_META_RESUME = load("queue_meta_resume")
QUEUE_META_GET = load("queue_meta_get")
QUEUE_META_SET_OVERRIDES = load("queue_meta_set_overrides")

# Worker hot path
JOB_CLAIM_AVAILABLE = load("job_claim_available")
JOB_FINALIZE_MANY = load("job_finalize_many")
JOB_HEARTBEAT_MANY = load("job_heartbeat_many")
JOB_FENCE_ATTEMPTS = load("job_fence_attempts")

# Maintenance
LEADER_TRY_LOCK = load("leader_try_lock")
JOB_PROMOTE_DUE = load("job_promote_due")
JOB_RESCUE_STALE_HEARTBEAT = load("job_rescue_stale_heartbeat")
JOB_RESCUE_PAST_DEADLINE = load("job_rescue_past_deadline")
JOB_PRUNE_FINALIZED = load("job_prune_finalized")

# Runtime registry
RUNTIME_INSTANCE_UPSERT = load("runtime_instance_upsert")
RUNTIME_INSTANCE_DELETE = load("runtime_instance_delete")
RUNTIME_INSTANCE_PRUNE = load("runtime_instance_prune")
RUNTIME_INSTANCE_LIST = load("runtime_instance_list")
