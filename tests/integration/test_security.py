"""Security checks of docs/security.md: parameterised statements only, fixed identifiers,
injection attempts through every value the API and the CLI accept, and the documented
least-privilege roles (which work, and cannot do more)."""

from __future__ import annotations

import ast
import concurrent.futures
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from importlib import resources
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import conninfo
from psycopg import errors as pg

import awa
from awa.client.unique import REQUIRED_UNIQUE_STATES
from awa.db import migrations
from awa.worker import listener, seats
from tests.acceptance.support import cli_env
from tests.conftest import PgServer
from tests.helpers import FAST_WORKER, stop_migrations_before, wait_for

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "awa"
EXECUTING = {"execute", "executemany", "copy", "stream"}

# (file, line text) of the only queries built at run time, and why each is safe.
ALLOWED_DYNAMIC = {
    ("worker/listener.py", "f'LISTEN {AVAILABLE_CHANNEL}'"): "a fixed channel constant",
    ("worker/listener.py", "f'LISTEN {CONTROL_CHANNEL}'"): "a fixed channel constant",
    ("db/migrations.py", "sql.SQL(_without_schema(m.sql) if schema_exists else m.sql)"): (
        "a migration file shipped in the package, less 0001's CREATE SCHEMA when one exists"
    ),
    ("db/connection.py", "query"): (
        "Cursor.execute passes its caller's query on to psycopg's (only deciding whether "
        "to prepare it): the callers are scanned"
    ),
    ("worker/listener.py", "f'LISTEN {self._handoff_channel}'"): (
        "the worker's own handoff channel: awa_handoff_ and its instance uuid's hex digits "
        "(seats.channel_for, checked below)"
    ),
}
# Query arguments that are the application's own SQL, passed through to psycopg.
PASS_THROUGH = {"client/transaction.py"}


def _module_constants(tree: ast.Module) -> set[str]:
    """Names bound at module level to a plain string literal."""
    names = set()
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        value = getattr(node, "value", None)
        literal = isinstance(value, ast.Constant) and isinstance(value.value, str)
        if isinstance(target, ast.Name) and literal:
            names.add(target.id)
    return names


def _literal_params(tree: ast.Module) -> set[str]:
    """Function parameters annotated ``LiteralString`` (mypy checks every caller)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for arg in node.args.args + node.args.kwonlyargs:
                if arg.annotation is not None and "LiteralString" in ast.unparse(arg.annotation):
                    names.add(arg.arg)
    return names


def _query_calls() -> Iterator[tuple[str, int, ast.expr, set[str]]]:
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        safe_names = _module_constants(tree) | _literal_params(tree)
        rel = path.relative_to(SRC).as_posix()
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in EXECUTING
                and node.args
            ):
                yield rel, node.lineno, node.args[0], safe_names


def _is_static(query: ast.expr, safe_names: set[str]) -> bool:
    """A string literal, a constant of awa.db.sql, a module string constant, or a
    parameter typed LiteralString."""
    if isinstance(query, ast.Constant):
        return isinstance(query.value, str)
    if isinstance(query, ast.IfExp):  # sql.A if unique else sql.B
        return _is_static(query.body, safe_names) and _is_static(query.orelse, safe_names)
    if isinstance(query, ast.Attribute):  # sql.JOB_INSERT
        return (
            isinstance(query.value, ast.Name) and query.value.id == "sql" and query.attr.isupper()
        )
    if isinstance(query, ast.Call):  # sql.job_list(...): one of a statement's fixed variants
        func = query.func
        return isinstance(func, ast.Attribute) and ast.unparse(func.value) == "sql"
    return isinstance(query, ast.Name) and query.id in safe_names


def test_every_statement_is_a_fixed_text_with_bound_parameters() -> None:
    found, offending = 0, []
    for rel, line, query, safe_names in _query_calls():
        found += 1
        text = ast.unparse(query)
        if rel in PASS_THROUGH or (rel, text) in ALLOWED_DYNAMIC:
            continue
        if not _is_static(query, safe_names):
            offending.append(f"{rel}:{line}: {text}")
    assert found > 40  # the scan does see awa's statements
    assert offending == [], "queries built at run time:\n" + "\n".join(offending)


def test_the_scan_catches_formatted_queries() -> None:
    for source in ['conn.execute(f"SELECT {x}")', 'conn.execute("SELECT %s" % x)',
                   'conn.execute("SELECT " + x)', 'conn.execute("SELECT {}".format(x))',
                   "cur.execute(query)"]:  # fmt: skip
        call = ast.parse(source).body[0].value  # type: ignore[attr-defined]
        assert not _is_static(call.args[0], set()), source


# The migrations that define awa.handoff_at_commit, which notifies a seat's own channel.
HANDOFFS = ("0015_handoff_seats.sql", "0037_handoffs_do_not_wait_for_a_pause.sql")


def test_identifiers_are_fixed_and_queues_travel_only_as_values() -> None:
    # The channels are constants, plain identifiers, the only ones awa ever uses.
    channels = {listener.AVAILABLE_CHANNEL, listener.CONTROL_CHANNEL}
    assert channels == {"awa_available", "awa_control"}
    texts = {
        entry.name: entry.read_text("utf-8")
        for package in ("awa.sql.queries", "awa.sql.migrations")
        for entry in resources.files(package).iterdir()
        if entry.name.endswith(".sql")
    }
    # A worker's handoff channel (ADR 0045) is its uuid's hex digits after a fixed prefix.
    assert re.fullmatch(r"awa_handoff_[0-9a-f]{32}", seats.channel_for(str(uuid.uuid4())))
    for name, text in texts.items():
        code = "\n".join(line.split("--")[0] for line in text.splitlines())
        for channel in re.findall(r"pg_notify\(\s*([^,]+),", code):
            if name in HANDOFFS and channel.strip() == "NEW.channel":
                continue  # the seat's owner, named by the worker itself (channel_for)
            assert channel.strip("' ") in channels and channel.startswith("'"), (name, channel)
        # Only named placeholders: no positional %s, no str.format fields.
        assert not re.search(r"%[^(%]", code.replace("%%", "")), name
        # Every table reference is schema-qualified with awa.
        for schema in re.findall(r"\b(?:FROM|JOIN|INTO|UPDATE|TABLE)\s+(\w+)\.", code, re.I):
            assert schema in ("awa", "EXCLUDED", "OLD", "NEW"), (name, schema)  # rows in triggers
    # Nothing composes identifiers at run time.
    for path in SRC.rglob("*.py"):
        source = path.read_text()
        assert "sql.Identifier" not in source and "Identifier(" not in source, path


# -- injection ---------------------------------------------------------------------------

PAYLOADS = [
    "x'); DROP TABLE public.sentinel; --",
    'x"; DROP TABLE public.sentinel; --',
    "'; DELETE FROM awa.jobs; SELECT '",
    "$$; DROP TABLE public.sentinel; $$",
    "%s %(queue)s {0} {queue} %%",
    "awa_control",
    "q\\'; TRUNCATE awa.jobs; --",
    "e'\\x27; DROP TABLE public.sentinel; --",
    "ünï ' \" ; -- /* */ \t\n",
]


def _tables(db: psycopg.Connection[Any]) -> list[tuple[str, str]]:
    return db.execute(
        "SELECT schemaname, tablename FROM pg_tables "
        "WHERE schemaname NOT IN ('pg_catalog', 'information_schema') ORDER BY 1, 2"
    ).fetchall()


def _sentinel(db: psycopg.Connection[Any]) -> None:
    assert ("awa", "jobs") in _tables(db) and ("public", "sentinel") not in _tables(db)
    db.execute("CREATE TABLE public.sentinel (v text)")
    db.execute("INSERT INTO public.sentinel VALUES ('alive')")
    _TABLES_BEFORE[id(db)] = _tables(db)


def _check_sentinel(db: psycopg.Connection[Any]) -> None:
    assert db.execute("SELECT v FROM public.sentinel").fetchall() == [("alive",)]
    assert _tables(db) == _TABLES_BEFORE.pop(id(db))  # nothing dropped, nothing created


_TABLES_BEFORE: dict[int, list[tuple[str, str]]] = {}


async def test_injection_through_every_value_round_trips_verbatim(
    client: awa.AsyncClient, db: psycopg.Connection[Any]
) -> None:
    _sentinel(db)
    done: list[str] = []
    for p in PAYLOADS:

        @client.task(None, kind=p, queue=p)
        async def handler(job: awa.Job[Any]) -> None:
            done.append(job.kind)

        client.periodic(p, "0 3 * * *", {p: p}, kind=p, queue=p, tags=[p], metadata={p: p})
    for p in PAYLOADS:  # paused first, so nothing runs before the checks below
        await client.pause_queue(p, paused_by=p)
    await client.start(
        [awa.QueueConfig(p, max_workers=1) for p in PAYLOADS],
        **{**FAST_WORKER, "override_refresh_ms": 100},
    )
    try:
        expected = 0
        for p in PAYLOADS:
            unique = {"by_queue": True}
            job = await client.insert({p: p}, kind=p, queue=p, tags=[p], metadata={p: p},
                                      unique_opts=unique)  # fmt: skip
            [copied] = await client.insert_many([{p: [p]}], kind=p, queue=p, tags=[p])
            for stored, args in ((await client.get_job(job.id), {p: p}),
                                 (await client.get_job(copied.id), {p: [p]})):  # fmt: skip
                assert (stored.kind, stored.queue, stored.tags, stored.args) == (p, p, [p], args)
            assert (await client.get_job(job.id)).metadata == {p: p}
            listed = await client.list_jobs(kind=p, queue=p)
            assert {j.id for j in listed} == {job.id, copied.id}
            cancelled = await client.cancel_by_unique_key({p: p}, kind=p, queue=p,
                                                          unique_opts=unique)  # fmt: skip
            assert cancelled is not None and cancelled.id == job.id
            [meta] = [s for s in await client.queue_stats() if s.queue == p]
            assert meta.paused
            overrides = await client.set_runtime_overrides(p, claim_batch_size=7)
            assert overrides.claim_batch_size == 7
            assert await client.retry_failed(kind=p, queue=p) == []
            assert await client.discard_failed(p) == 0
            assert await client.list_dlq(kind=p, queue=p) == []
            with pytest.raises(awa.CallbackNotFound):
                await client.fail_external(str(uuid.uuid4()), p)
            fired = await client.trigger_cron(p)
            assert (fired.kind, fired.metadata["cron_name"]) == (p, p)
            row = db.execute("SELECT paused_by FROM awa.queue_meta WHERE queue = %s", (p,))
            assert row.fetchall() == [(p,)]
            await client.resume_queue(p)
            expected += 2  # the insert_many job and the triggered one
        rows = db.execute("SELECT queue, override_claim_batch_size FROM awa.queue_meta")
        assert dict(rows.fetchall()) == dict.fromkeys(PAYLOADS, 7)
        names = {s.name for s in await client.list_cron_schedules()}
        assert names == set(PAYLOADS)

        async def all_ran() -> bool:
            return len(done) == expected

        await wait_for(all_ran, timeout=30)  # LISTEN/NOTIFY carried every queue name
        assert sorted(done) == sorted(p for p in PAYLOADS for _ in range(2))
        for p in PAYLOADS:
            await client.pause_cron(p)
            await client.remove_cron(p)
            assert await client.drain_queue(p) == 0
    finally:
        await client.shutdown()
    _check_sentinel(db)


def test_injection_through_cli_arguments(database_url: str, db: psycopg.Connection[Any]) -> None:
    _sentinel(db)

    def awa_cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "awa", "--database-url", database_url, *args, "--json"],
            cwd=ROOT, env=cli_env(), capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip

    payloads = PAYLOADS[:4]
    commands = [(["queue", "pause", p, "--by", p], 0) for p in payloads]
    commands += [(["queue", "overrides", "set", p, "--rate-limit", "2"], 0) for p in payloads]
    commands += [(["job", "list", "--kind", p, "--queue", p], 0) for p in payloads]
    commands += [(["cron", "trigger", p], 1) for p in payloads]
    commands += [(["dlq", "purge", "--kind", p, "--queue", p], 0) for p in payloads]
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda c: awa_cli(*c[0]), commands))
    for (args, status), result in zip(commands, results, strict=True):
        assert result.returncode == status, (args, result.stderr)
    rows = db.execute(
        "SELECT queue, paused, paused_by, override_rate_limit FROM awa.queue_meta"
    ).fetchall()
    assert sorted(rows) == sorted((p, True, p, 2.0) for p in payloads)
    _check_sentinel(db)


# -- least privilege ---------------------------------------------------------------------


def _sql_blocks() -> list[str]:
    text = (ROOT / "docs" / "security.md").read_text()
    return re.findall(r"```sql\n(.*?)```", text, re.S)


def _statements(block: str, names: dict[str, str]) -> list[str]:
    for old, new in names.items():
        block = re.sub(rf"\b{old}\b", new, block)
    return [s.strip() for s in block.split(";") if s.strip()]


@pytest.fixture
def roles(pg_server: PgServer, empty_database_url: str) -> Iterator[dict[str, str]]:
    """The roles of docs/security.md, created from its SQL, with URLs to connect as each."""
    with psycopg.connect(pg_server.admin_url, autocommit=True) as admin:
        row = admin.execute(
            "SELECT rolsuper OR rolcreaterole FROM pg_roles WHERE rolname = current_user"
        ).fetchone()
    if not (row and row[0]):
        pytest.skip("the test server's role cannot create roles")
    dbname = str(conninfo.conninfo_to_dict(empty_database_url)["dbname"])
    tag = uuid.uuid4().hex[:8]
    names = {r: f"{r}_{tag}" for r in ("awa_owner", "awa_app", "awa_producer")}
    names["app"] = f'"{dbname}"'
    password = uuid.uuid4().hex
    names["change-me"] = password
    created, _, _ = _sql_blocks()
    with psycopg.connect(pg_server.admin_url, autocommit=True) as admin:
        for statement in _statements(created, names):
            admin.execute(statement)  # test-only: DDL from our own docs
    urls = {
        role: conninfo.make_conninfo(empty_database_url, user=names[role], password=password)
        for role in ("awa_owner", "awa_app", "awa_producer")
    }
    try:
        yield {**urls, **{f"{r}:name": n for r, n in names.items()}}
    finally:
        with psycopg.connect(empty_database_url, autocommit=True) as admin:
            for role in ("awa_app", "awa_producer", "awa_owner"):
                admin.execute(f'DROP OWNED BY "{names[role]}" CASCADE')
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = ANY(%s)",
                ([names[r] for r in ("awa_owner", "awa_app", "awa_producer")],),
            )
        with psycopg.connect(pg_server.admin_url, autocommit=True) as admin:
            for role in ("awa_app", "awa_producer", "awa_owner"):
                admin.execute(f'DROP ROLE IF EXISTS "{names[role]}"')


FORBIDDEN = [
    "DROP TABLE awa.jobs",
    "TRUNCATE awa.jobs",
    "ALTER TABLE awa.jobs ADD COLUMN evil int",
    "ALTER TABLE awa.jobs DISABLE TRIGGER ALL",
    "CREATE TABLE awa.evil (x int)",
    "CREATE SCHEMA evil",
    "DROP SCHEMA awa CASCADE",
    "DELETE FROM awa.schema_version",
    "INSERT INTO awa.schema_version (version, name) VALUES (99, 'evil')",
    "DROP FUNCTION awa.move_failed_to_dlq()",
    "CREATE OR REPLACE FUNCTION awa.job_state_in_bitmask(mask bit(8), state awa.job_state) "
    "RETURNS boolean LANGUAGE sql IMMUTABLE AS $$ SELECT true $$",
    "UPDATE awa.dlq SET kind = 'evil'",
]


# The counts of finished jobs are written with their owner's rights (migration 0038): a
# role that may not update the jobs may not call what writes them.
WRITES_OF_THE_COUNTS = [
    "SELECT awa.fold_finished_counts()",
    "SELECT awa.count_finished_outcomes(ARRAY['q'], ARRAY['completed']::awa.job_state[], "
    "ARRAY[now()], ARRAY[-1000]::bigint[])",
]


async def test_least_privilege_roles_work_and_cannot_do_more(roles: dict[str, str]) -> None:
    async with awa.AsyncClient(roles["awa_owner"]) as owner:
        assert await owner.migrate()
    names = {r: roles[f"{r}:name"] for r in ("awa_owner", "awa_app", "awa_producer")}
    _, app_grants, producer_grants = _sql_blocks()
    with psycopg.connect(roles["awa_owner"], autocommit=True) as conn:
        for statement in _statements(app_grants, names) + _statements(producer_grants, names):
            conn.execute(statement)  # test-only: grants from our own docs
    await _run_everything_as(roles["awa_app"])
    with psycopg.connect(roles["awa_app"], autocommit=True) as conn:
        for statement in FORBIDDEN:
            with pytest.raises(pg.InsufficientPrivilege):
                conn.execute(statement)
        conn.execute("GRANT SELECT ON awa.queue_meta TO PUBLIC")  # only a warning: nothing
    with psycopg.connect(roles["awa_producer"], autocommit=True) as conn:
        row = conn.execute("SELECT has_table_privilege('awa.queue_meta', 'SELECT')").fetchone()
        assert row == (False,)
    async with awa.AsyncClient(roles["awa_app"]) as app:  # a partitioned queue
        await app.set_queue_limits("parted", concurrency=1, partition_by="n")
    async with awa.AsyncClient(roles["awa_producer"]) as producer:
        job = await producer.insert({"n": 1}, kind="k", queue="plain")
        keyed = await producer.insert({"n": 7}, kind="k", queue="parted")  # keyed at insert
        assert len(await producer.insert_many([{"n": 2}, {"n": 3}], kind="k")) == 2
        assert (await producer.get_job(job.id)).args == {"n": 1}
        with pytest.raises(awa.DatabaseError, match="permission denied"):
            await producer.cancel(job.id)
        # A key held by a dead-lettered job (migration 0031) is checked and named for a role
        # that cannot read the DLQ, without spoiling its transaction.
        guard = {"states": [*REQUIRED_UNIQUE_STATES, "failed"]}
        held = await producer.insert({"n": 9}, kind="k", queue="dead", unique_opts=guard)
        with psycopg.connect(roles["awa_app"], autocommit=True) as conn:
            conn.execute("UPDATE awa.jobs SET state = 'failed' WHERE id = %s", (held.id,))
        async with producer.transaction() as tx:
            with pytest.raises(awa.UniqueConflict) as refused:
                await tx.insert({"n": 9}, kind="k", queue="dead", unique_opts=guard)
            assert refused.value.existing_id == held.id
            await tx.insert({"n": 10}, kind="k", queue="dead")
    with psycopg.connect(roles["awa_owner"], autocommit=True) as conn:
        query = "SELECT partition_key FROM awa.jobs WHERE id = %s"
        assert conn.execute(query, (keyed.id,)).fetchone() == ("7",)
    with psycopg.connect(roles["awa_producer"], autocommit=True) as conn:
        for statement in ["UPDATE awa.jobs SET state = 'running'", "DELETE FROM awa.jobs",
                          "SELECT * FROM awa.queue_meta", "SELECT channel FROM awa.handoff_seats",
                          "SELECT seat_id FROM awa.handoff_seats",
                          "SELECT * FROM awa.queue_limits", *FORBIDDEN[:3],
                          *WRITES_OF_THE_COUNTS]:  # fmt: skip
            with pytest.raises(pg.InsufficientPrivilege):
                conn.execute(statement)


async def test_after_the_upgrade_that_counts_outcomes_the_app_role_still_completes_jobs(
    roles: dict[str, str],
    pg_server: PgServer,
    empty_database_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Migration 0038's two functions that write counts are not PUBLIC's: the upgrade grants
    them to the roles that may update the jobs, so a fleet granted before it keeps
    completing jobs without re-running the grant block; here through a login role that is
    the app role only by SET ROLE (a review: a check of session_user refused it)."""
    go_on = stop_migrations_before(monkeypatch, 38)
    async with awa.AsyncClient(roles["awa_owner"]) as owner:
        await owner.migrate()
    names = {r: roles[f"{r}:name"] for r in ("awa_owner", "awa_app", "awa_producer")}
    _, app_grants, _ = _sql_blocks()
    with psycopg.connect(roles["awa_owner"], autocommit=True) as conn:
        for statement in _statements(app_grants, names):
            if "finished" not in statement:  # the block as it was before 0038
                conn.execute(statement)  # test-only: grants from our own docs
    login, password = f"awa_login_{uuid.uuid4().hex[:8]}", roles["change-me:name"]
    dbname = str(conninfo.conninfo_to_dict(empty_database_url)["dbname"])
    with psycopg.connect(pg_server.admin_url, autocommit=True) as admin:
        admin.execute(  # test-only DDL
            f"CREATE ROLE \"{login}\" LOGIN NOINHERIT PASSWORD '{password}' "
            f'IN ROLE "{names["awa_app"]}"'
        )
        admin.execute(f'GRANT CONNECT ON DATABASE "{dbname}" TO "{login}"')
    try:
        pending = go_on()
        async with awa.AsyncClient(roles["awa_owner"]) as owner:
            assert await owner.migrate() == pending
        url = conninfo.make_conninfo(
            empty_database_url, user=login, password=password,
            options=f"-c role={names['awa_app']}",
        )  # fmt: skip
        await _run_everything_as(url)
        for function in (
            "awa.count_finished_outcomes(text[], awa.job_state[], timestamptz[], bigint[])",
            "awa.fold_finished_counts()",
        ):  # each refused at start, naming the grant
            with psycopg.connect(roles["awa_owner"], autocommit=True) as conn:
                conn.execute(f'REVOKE EXECUTE ON FUNCTION {function} FROM "{names["awa_app"]}"')
            async with awa.AsyncClient(url) as client:
                client.task(None, kind="k", queue="plain")(lambda job: None)
                with pytest.raises(awa.DatabaseError, match="GRANT EXECUTE ON FUNCTION"):
                    await client.start(["plain"])
            with psycopg.connect(roles["awa_owner"], autocommit=True) as conn:
                conn.execute(f'GRANT EXECUTE ON FUNCTION {function} TO "{names["awa_app"]}"')
    finally:
        with psycopg.connect(empty_database_url, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                (login,),
            )
        with psycopg.connect(pg_server.admin_url, autocommit=True) as admin:
            admin.execute(f'DROP OWNED BY "{login}" CASCADE')
            admin.execute(f'DROP ROLE IF EXISTS "{login}"')


async def test_migrate_of_a_newer_schema_says_upgrade_whatever_the_role(
    roles: dict[str, str],
) -> None:
    """An old release's `awa migrate` run as the app role (no right to create) says
    "upgrade awa", not "permission denied for database" (a review)."""
    async with awa.AsyncClient(roles["awa_owner"]) as as_owner:
        assert await as_owner.migrate()
    names = {r: roles[f"{r}:name"] for r in ("awa_owner", "awa_app", "awa_producer")}
    _, app_grants, _ = _sql_blocks()
    with psycopg.connect(roles["awa_owner"], autocommit=True) as conn:
        for statement in _statements(app_grants, names):
            conn.execute(statement)  # test-only: grants from our own docs
        conn.execute("INSERT INTO awa.schema_version (version, name) VALUES (9999, 'future')")
    async with awa.AsyncClient(roles["awa_app"]) as app:
        with pytest.raises(awa.SchemaTooNew, match="upgrade awa"):
            await app.migrate()


async def _run_everything_as(url: str) -> None:
    """A worker with every maintenance service, and the admin API, as the app role."""
    client = awa.AsyncClient(url)

    @client.task(None, kind="k", queue="plain")
    async def run(job: awa.Job[Any]) -> None:
        if job.args.get("fail"):
            raise awa.TerminalError("to the DLQ")

    client.periodic("every-second", "* * * * * *", {}, kind="k", queue="plain")
    await client.start(["plain", awa.QueueConfig("dead", dlq=True)], **FAST_WORKER)
    worker = client._worker
    try:
        await wait_for(lambda: _is_leader(client), timeout=30)
        done = await client.insert_many([{"n": i} for i in range(5)], kind="k", queue="plain")
        dead = await client.insert({"fail": True}, kind="k", queue="dead")
        soon = datetime.now(UTC) + timedelta(milliseconds=300)
        promoted = await client.insert({}, kind="k", queue="plain", run_at=soon)
        later = await client.insert({}, kind="k", queue="plain", run_at=soon + timedelta(hours=1))

        async def settled() -> bool:
            jobs = [await client.get_job(j.id) for j in [*done, promoted]]
            return all(j.state is awa.JobState.COMPLETED for j in jobs) and bool(
                await client.list_dlq(queue="dead")
            )

        await wait_for(settled, timeout=30)
        assert [job.id for job in await client.retry_from_dlq([dead.id])] == [dead.id]
        assert (await client.cancel(later.id)).state is awa.JobState.CANCELLED
        assert (await client.retry(later.id)).state is awa.JobState.AVAILABLE
        parked = await client.insert({}, kind="k", queue="plain", run_at=soon + timedelta(hours=1))
        moved = await client.apply_batch(awa.SetPriority(1), ids=[parked.id], chunk_size=1)
        assert (moved.state, moved.processed) == ("completed", 1)
        assert await client.move_failed_to_dlq(queue="plain") == 0
        assert await client.dlq_depth("plain") == 0  # readable by the app role
        await client.pause_queue("plain", paused_by="ops")
        await client.resume_queue("plain")
        await client.set_runtime_overrides("plain", poll_interval_ms=100)
        await client.clear_runtime_overrides("plain")
        await client.trigger_cron("every-second")
        await client.pause_cron("every-second")
        await client.resume_cron("every-second")
        assert await client.queue_stats()
        await wait_for(client.list_runtime_instances, timeout=30)

        async def every_service_ticked() -> bool:
            services = [worker.heartbeat, worker.publisher, *worker.leader._services]
            return all(s.ticks >= 1 for s in services)

        await wait_for(every_service_ticked, timeout=30)
        services = [worker.heartbeat, worker.publisher, *worker.leader._services]
        assert {s.name: s.failures for s in services if s.failures} == {}
        assert worker.completer.healthy
        assert all(d.healthy for d in worker.dispatchers.values())
    finally:
        await client.shutdown()
        await client.close()


async def _is_leader(client: awa.AsyncClient) -> bool:
    return (await client.health_check()).leader


async def test_migration_0021_narrows_an_older_producer_grant_to_the_probed_columns(
    roles: dict[str, str],
) -> None:
    """Granted as docs/security.md said before 0021 (SELECT on the whole seats table), a
    producer could read every worker's notice channel. Applying 0021 again as the owner
    leaves it the two columns a single insert probes; the workers' role keeps it all."""
    async with awa.AsyncClient(roles["awa_owner"]) as owner:
        await owner.migrate()
    names = {r: roles[f"{r}:name"] for r in ("awa_owner", "awa_app", "awa_producer")}
    _, app_grants, producer_grants = _sql_blocks()
    producer, app = names["awa_producer"], names["awa_app"]
    with psycopg.connect(roles["awa_owner"], autocommit=True) as conn:
        for statement in _statements(app_grants, names) + _statements(producer_grants, names):
            conn.execute(statement)  # test-only: grants from our own docs
        conn.execute(f'GRANT SELECT ON awa.handoff_seats TO "{producer}"')  # the old advice
        (migration,) = [m for m in migrations.migrations() if m.version == 21]
        conn.execute(migration.sql)

        def may_read(role: str, column: str) -> bool:
            row = conn.execute(
                "SELECT has_column_privilege(%s, 'awa.handoff_seats', %s, 'SELECT')",
                (role, column),
            ).fetchone()
            return bool(row and row[0])

        assert [may_read(producer, c) for c in ("queue", "job_id", "channel", "seat_id")] == [
            True, True, False, False,
        ]  # fmt: skip
        assert may_read(app, "channel") and may_read(app, "seat_id")
    async with awa.AsyncClient(roles["awa_producer"]) as as_producer:
        await as_producer.insert({"n": 1}, kind="k", queue="plain")  # the probe still runs


COUNT_OUTCOMES = "awa.count_finished_outcomes(text[], awa.job_state[], timestamptz[], bigint[])"


def _read_only_grants() -> list[str]:
    """docs/security.md's read-only block (a plain fence: the blocks above are sql)."""
    text = (ROOT / "docs" / "security.md").read_text()
    (block,) = re.findall(r"```\n(GRANT USAGE ON SCHEMA awa TO awa_readonly;.*?)```", text, re.S)
    return _statements(block, {})


async def test_the_documented_read_only_grants_show_every_page_and_a_refusal_is_403(
    roles: dict[str, str], pg_server: PgServer, empty_database_url: str
) -> None:
    """docs/security.md's read-only role: every dashboard page and /metrics answer. A page
    the database refuses for want of a privilege says so with 403: it answered 503, "the
    database did not answer", which reads as a moment to retry (a review)."""
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient

    from awa.dashboard.app import DashboardSettings, create_app

    async with awa.AsyncClient(roles["awa_owner"]) as owner:
        await owner.migrate()
        await owner.insert({}, kind="k", queue="q")
    # A role of its own, given the docs' block and nothing else.
    reader, password = f"awa_readonly_{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    dbname = str(conninfo.conninfo_to_dict(empty_database_url)["dbname"])
    with psycopg.connect(pg_server.admin_url, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE \"{reader}\" LOGIN PASSWORD '{password}'")  # test-only
        admin.execute(f'GRANT CONNECT ON DATABASE "{dbname}" TO "{reader}"')
    try:
        with psycopg.connect(roles["awa_owner"], autocommit=True) as conn:
            for statement in _read_only_grants():
                conn.execute(statement.replace("awa_readonly", f'"{reader}"'))
        url = conninfo.make_conninfo(empty_database_url, user=reader, password=password)
        app = create_app(DashboardSettings(database_url=url, read_only=True))
        with TestClient(app, base_url="http://127.0.0.1") as http:
            for page in ("/", "/queues/q", "/jobs", "/runtime", "/pool", "/batches", "/metrics"):
                assert http.get(page).status_code == 200, page
            with psycopg.connect(roles["awa_owner"], autocommit=True) as conn:
                conn.execute(f'REVOKE SELECT ON awa.dlq FROM "{reader}"')
            refused = http.get("/queues/q")
        with psycopg.connect(url, autocommit=True) as conn:
            for statement in WRITES_OF_THE_COUNTS:
                with pytest.raises(pg.InsufficientPrivilege):
                    conn.execute(statement)
        # A worker as this role, given the EXECUTE a start refusal once named alone: it
        # then failed on cron_schedules with a driver's traceback (a review).
        with psycopg.connect(roles["awa_owner"], autocommit=True) as conn:
            conn.execute(f'GRANT EXECUTE ON FUNCTION awa.fold_finished_counts(), '
                         f'{COUNT_OUTCOMES} TO "{reader}"')  # fmt: skip
        async with awa.AsyncClient(url) as as_reader:
            as_reader.task(None, kind="k", queue="q")(lambda job: None)
            with pytest.raises(awa.DatabaseError) as start_refused:
                await as_reader.start(["q"])
    finally:
        with psycopg.connect(empty_database_url, autocommit=True) as admin:
            admin.execute(f'DROP OWNED BY "{reader}" CASCADE')
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                (reader,),
            )
        with psycopg.connect(pg_server.admin_url, autocommit=True) as admin:
            admin.execute(f'DROP ROLE IF EXISTS "{reader}"')
    assert refused.status_code == 403
    assert "lacks a privilege" in refused.text and "dlq" in refused.text
    said = str(start_refused.value)
    assert "GRANT INSERT, UPDATE, DELETE ON awa.jobs TO it" in said
    assert "GRANT INSERT, UPDATE, DELETE ON awa.cron_schedules TO it" in said
    assert "GRANT SELECT, INSERT, DELETE ON awa.dlq TO it" in said  # its SELECT revoked above
    assert "EXECUTE" not in said
