"""The SQL statements of awa, each loaded once from ``awa/sql/queries/<name>.sql``.

Every statement lives in its own file with a header saying why its shape matters; this
module only names them, so a grep for a constant finds each caller. A test checks that
every file is named here and every name has a file.
"""

from __future__ import annotations

import re
from importlib import resources
from typing import LiteralString


def load(name: str) -> LiteralString:
    """The text of ``awa/sql/queries/<name>.sql``."""
    # Our own package data, never user input: safe to treat as a literal query.
    return resources.files("awa.sql.queries").joinpath(f"{name}.sql").read_text("utf-8")


def without(query: LiteralString, part: str) -> LiteralString:
    """``query`` without its lines from ``-- <part> {`` to ``-- } <part>`` (a statement's
    optional part, kept in one file with the rest)."""
    marked = re.compile(rf"^[ \t]*-- {part} {{\n.*?^[ \t]*-- }} {part}\n", re.M | re.S)
    left, found = marked.subn("", query)
    if found != 1:
        raise ValueError(f"the statement has no single '{part}' part")
    return left  # our own text, less some of its lines


# Producing
JOB_INSERT_UNIQUE = load("job_insert")  # a duplicate key inserts nothing, returns no row
JOB_INSERT = without(JOB_INSERT_UNIQUE, "unique")
JOB_INSERT_UNSEATED = without(JOB_INSERT, "seat")  # no handoff-seat probe (ADR 0049)
JOB_INSERT_UNIQUE_UNSEATED = without(JOB_INSERT_UNIQUE, "seat")
JOB_RESERVE_IDS = load("job_reserve_ids")
JOB_COPY_IN = load("job_copy_in")
JOB_COPY_IN_DEFAULTS = load("job_copy_in_defaults")

# Admin
JOB_GET = load("job_get")
_job_list = load("job_list")  # two statements in one file: each leaves the other's part out
LIST_FILTERS = ("state", "kind", "queue")  # the job listing's optional filters


def _job_lists() -> dict[tuple[bool, frozenset[str]], LiteralString]:
    found: dict[tuple[bool, frozenset[str]], LiteralString] = {}
    for summaries in (False, True):
        shown = without(_job_list, "rows" if summaries else "summaries")
        for mask in range(2 ** len(LIST_FILTERS)):
            given = frozenset(f for i, f in enumerate(LIST_FILTERS) if mask >> i & 1)
            query = shown
            for name in LIST_FILTERS:
                query = without(query, name) if name not in given else query
            found[summaries, given] = query
    return found


_JOB_LISTS = _job_lists()


def job_list(*, summaries: bool, given: frozenset[str]) -> LiteralString:
    """The job listing with the filters ``given`` (of state, kind, queue) and no others."""
    return _JOB_LISTS[summaries, given]


JOB_CANCEL = load("job_cancel")
JOB_CANCEL_BY_UNIQUE_KEY = load("job_cancel_by_unique_key")
JOB_RETRY = load("job_retry")
JOB_RETRY_HELD_BY = load("job_retry_held_by")
_job_retry_failed = load("job_retry_failed")  # the jobs, or how many
JOB_RETRY_FAILED = without(_job_retry_failed, "count")
JOB_RETRY_FAILED_COUNT = without(_job_retry_failed, "rows")
JOB_RETRY_FAILED_HELD_BACK = load("job_retry_failed_held_back")
JOB_DISCARD_FAILED = load("job_discard_failed")
QUEUE_DRAIN = load("queue_drain")
QUEUE_STATS = load("queue_stats")
QUEUE_META_PAUSE = load("queue_meta_pause")
QUEUE_META_RESUME = load("queue_meta_resume")
QUEUE_META_FORGET_PLAIN = load("queue_meta_forget_plain")
QUEUE_META_GET = load("queue_meta_get")
QUEUE_META_SET_OVERRIDES = load("queue_meta_set_overrides")
QUEUE_META_CLEAR_OVERRIDES = load("queue_meta_clear_overrides")

# Explain
JOB_EXPLAIN = load("job_explain")
JOB_OLDEST_AVAILABLE = load("job_oldest_available")
# Fleet limits and the fleet pool (ADR 0010)
QUEUE_LOCK = load("queue_lock")
QUEUE_PARTITION_LOCK = load("queue_partition_lock")
QUEUE_LIMITS_WRITER_LOCK = load("queue_limits_writer_lock")
QUEUE_RUNNING_LOCK = load("queue_running_lock")
LOCK_WAIT_BOUND = load("lock_wait_bound")
QUEUE_LIMITS_SET = load("queue_limits_set")
QUEUE_LIMITS_CLEAR = load("queue_limits_clear")
QUEUE_LIMITS_GET = load("queue_limits_get")
QUEUE_LIMITS_STATUS = load("queue_limits_status")
POOL_LOCK = load("pool_lock")
FLEET_POOL_SET = load("fleet_pool_set")
FLEET_POOL_CLEAR = load("fleet_pool_clear")
FLEET_POOL_GET = load("fleet_pool_get")

# Worker hot path
JOB_CLAIM_AVAILABLE = load("job_claim_available")
QUEUE_CONTROL_LIST = load("queue_control_list")
QUEUE_PROBE_AVAILABLE = load("queue_probe_available")
# Handoff seats (ADR 0045): idle permits parked where an insert's commit can claim for them
SEATS_PARK = load("seats_park")
SEATS_RELEASE = load("seats_release")
SEATS_RENEW = load("seats_renew")
SEATS_RESYNC = load("seats_resync")
SEATS_GIVE_BACK = load("seats_give_back")
SEATS_PRUNE = load("seats_prune")
JOB_FINALIZE_MANY = load("job_finalize_many")
JOB_UNIQUE_HOLDER = load("job_unique_holder")
_attempt_writes = load("job_attempt_writes")  # the heartbeat and the progress write
JOB_HEARTBEAT_MANY = without(_attempt_writes, "progress")
JOB_CANCELLED_AMONG = load("job_cancelled_among")
JOB_FENCE_ATTEMPTS = load("job_fence_attempts")
JOB_FENCE_HOLD = load("job_fence_hold")
JOB_FENCE_RELEASE = load("job_fence_release")

# Durable outcomes (lifecycle hooks fire once an outcome survives a server crash)
WAL_POSITIONS = load("wal_positions")
WAL_FLUSH_NOW = load("wal_flush_now")
JOB_OUTCOMES_STORED = load("job_outcomes_stored")

# Maintenance
LEADER_LEASE_ACQUIRE = load("leader_lease_acquire")
LEADER_LEASE_RENEW = load("leader_lease_renew")
LEADER_LEASE_RELEASE = load("leader_lease_release")
JOB_PROMOTE_DUE = load("job_promote_due")
JOB_RESCUE_STALE_HEARTBEAT = load("job_rescue_stale_heartbeat")
JOB_RESCUE_PAST_DEADLINE = load("job_rescue_past_deadline")
JOB_PRUNE_FINALIZED = load("job_prune_finalized")
JOBS_VACUUM_DUE = load("jobs_vacuum_due")
JOBS_VACUUM = load("jobs_vacuum")
CONTROL_TABLES_STALE = load("control_tables_stale")
CONTROL_TABLES_ANALYZE = load("control_tables_analyze")
FINISHED_COUNTS_FOLD = load("finished_counts_fold")
ROLE_MISSING_WORKER_GRANTS = load("role_missing_worker_grants")

# Runtime registry
RUNTIME_INSTANCE_UPSERT = load("runtime_instance_upsert")
RUNTIME_INSTANCE_DELETE = load("runtime_instance_delete")
RUNTIME_INSTANCE_PRUNE = load("runtime_instance_prune")
RUNTIME_INSTANCE_LIST = load("runtime_instance_list")

# Periodic jobs
CRON_SCHEDULE_UPSERT = load("cron_schedule_upsert")
CRON_SCHEDULE_LIST = load("cron_schedule_list")
CRON_SCHEDULE_FIRE = load("cron_schedule_fire")
CRON_SCHEDULE_TRIGGER = load("cron_schedule_trigger")
CRON_SCHEDULE_PAUSE = load("cron_schedule_pause")
CRON_SCHEDULE_RESUME = load("cron_schedule_resume")
CRON_SCHEDULE_DELETE = load("cron_schedule_delete")

# Progress and external callbacks
JOB_PROGRESS_MANY = without(_attempt_writes, "beat")
JOB_REGISTER_CALLBACK = load("job_register_callback")
JOB_COMPLETE_EXTERNAL = load("job_complete_external")
JOB_FAIL_EXTERNAL = load("job_fail_external")
JOB_RETRY_EXTERNAL = load("job_retry_external")
JOB_RESUME_EXTERNAL = load("job_resume_external")
JOB_CALLBACK_WAIT = load("job_callback_wait")
JOB_CALLBACK_STATE = load("job_callback_state")
JOB_CALLBACK_RESUMED = load("job_callback_resumed")
JOB_HEARTBEAT_CALLBACK = load("job_heartbeat_callback")
JOB_RESCUE_CALLBACK_TIMEOUT = load("job_rescue_callback_timeout")
JOB_RELEASE_ANSWERED_PARKED = load("job_release_answered_parked")

# Dead letter queue
QUEUE_META_SET_DLQ = load("queue_meta_set_dlq")
DLQ_LIST = load("dlq_list")
_dlq_retry = load("dlq_retry")  # the jobs, or how many
DLQ_RETRY = without(_dlq_retry, "count")
DLQ_RETRY_COUNT = without(_dlq_retry, "rows")
DLQ_HELD_BACK = load("dlq_held_back")
DLQ_PURGE = load("dlq_purge")
DLQ_PRUNE = load("dlq_prune")
RATE_BUCKETS_PRUNE = load("rate_buckets_prune")
DLQ_GET = load("dlq_get")
DLQ_DEPTH = load("dlq_depth")
DLQ_MOVE_FAILED = load("dlq_move_failed")

# Batch operations
BATCH_PREVIEW = load("batch_preview")
BATCH_SUBMIT = load("batch_submit")
BATCH_RUN_CHUNK = load("batch_run_chunk")
BATCH_CANCEL = load("batch_cancel")
BATCH_GET = load("batch_get")
BATCH_LIST = load("batch_list")
BATCH_LIST_STALLED = load("batch_list_stalled")
BATCH_PRUNE = load("batch_prune")

# awa.testing
JOB_NEXT_AVAILABLE_OF_KIND = load("job_next_available_of_kind")
SCHEMA_CLEAN = load("schema_clean")
JOB_CLAIM_ONE = load("job_claim_one")

# Priority aging
JOB_AGE_PRIORITY = load("job_age_priority")

# Connections: a direct one, or through a pooler (db/connection.py)
SESSION_BACKEND_PID = load("session_backend_pid")
SESSION_ISO_DATES = load("session_iso_dates")

# A unique insert inside a caller's transaction (client/insert.py insert_one, the bridge):
# a savepoint, so its UniqueConflict may be caught and the transaction goes on.
INSERT_SAVEPOINT = load("insert_savepoint")
INSERT_SAVEPOINT_RELEASE = load("insert_savepoint_release")
INSERT_SAVEPOINT_ROLLBACK = load("insert_savepoint_rollback")


def _reads_whole_rows(query: str) -> bool:
    code = "\n".join(line.split("--", 1)[0] for line in query.splitlines())
    return _WHOLE_ROWS.search(code) is not None


_WHOLE_ROWS = re.compile(r"\bSELECT\s+\*|\bRETURNING\s+\*|\b\w+\.\*")

# The statements above that return whole rows (``SELECT *``, ``RETURNING *``, ``j.*``):
# never prepared (awa.db.connection.Cursor). Prepared, such a statement failed on every
# call with "cached plan must not change result type" once a migration added a column,
# until its connection was replaced. The rest name their columns, and stay preparable.
WHOLE_ROWS: frozenset[str] = frozenset(
    query for query in list(globals().values())
    if isinstance(query, str) and query.lstrip().startswith("--") and _reads_whole_rows(query)
)  # fmt: skip
