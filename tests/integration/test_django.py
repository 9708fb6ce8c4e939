"""awa.contrib.django with the example project (examples/django) on the test PostgreSQL:
migrate applies awa's schema, enqueue joins Django's transactions, manage.py awa_worker
runs the project's tasks, and the queues page is read-only and for staff only."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

pytest.importorskip("django")

import django
from django.apps import apps

import awa
from awa.db import migrations
from tests.conftest import PgServer, _create_db, _drop_db
from tests.helpers import ROOT, wait_until

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "django"


@pytest.fixture(scope="module")
def django_db(pg_server: PgServer) -> Iterator[str]:
    """A database with no awa schema, and the example project set up on it (once per
    process: Django's settings cannot be loaded twice)."""
    name = _create_db(pg_server, None)
    url = pg_server.url_for(name)
    if apps.ready:
        pytest.skip("Django was already set up in this process for another database")
    saved = {k: os.environ.get(k) for k in ("DATABASE_URL", "DJANGO_SETTINGS_MODULE")}
    os.environ.update(DATABASE_URL=url, DJANGO_SETTINGS_MODULE="shopsite.settings")
    sys.path.insert(0, str(EXAMPLE))
    try:
        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        yield url
    finally:
        from django.db import connections

        connections.close_all()
        sys.path.remove(str(EXAMPLE))
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        _drop_db(pg_server, name)


def _jobs(url: str, kind: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(
            "SELECT id, queue, state::text FROM awa.jobs WHERE kind = %s ORDER BY id", (kind,)
        ).fetchall()


def test_migrate_applies_awa_schema(django_db: str) -> None:
    with psycopg.connect(django_db, autocommit=True) as conn:
        version = conn.execute("SELECT max(version) FROM awa.schema_version").fetchone()
        recorded = conn.execute("SELECT name FROM django_migrations WHERE app = 'awa'").fetchall()
    assert version == (migrations.latest_version(),)
    assert recorded == [("0001_awa_schema",)]


def test_every_migrate_applies_the_awa_migrations_a_newer_awa_brings(django_db: str) -> None:
    """As if awa was upgraded after the project's first migrate: its newest migration not
    applied yet. (Django sends post_migrate only to apps with a models module.)"""
    from django.core.management import call_command

    latest = migrations.latest_version()
    with psycopg.connect(django_db, autocommit=True) as conn:
        conn.execute("DELETE FROM awa.schema_version WHERE version = %s", (latest,))
    call_command("migrate", verbosity=0)  # Django has nothing to do; awa has one
    with psycopg.connect(django_db, autocommit=True) as conn:
        version = conn.execute("SELECT max(version) FROM awa.schema_version").fetchone()
    assert version == (latest,)


def test_enqueue_commits_and_rolls_back_with_the_atomic_block(django_db: str) -> None:
    from django.db import transaction

    from awa.contrib.django import enqueue

    with transaction.atomic():
        job = enqueue({"n": 1}, kind="tx_commit")
        assert _jobs(django_db, "tx_commit") == []  # not visible before the commit
    assert _jobs(django_db, "tx_commit") == [(job.id, "default", "available")]

    class Abort(Exception):
        pass

    with pytest.raises(Abort), transaction.atomic():
        enqueue({"n": 2}, kind="tx_rollback")
        raise Abort
    assert _jobs(django_db, "tx_rollback") == []

    # on_commit: the callback runs only when (and after) the outer block commits.
    for outcome in ("rollback", "commit"):
        try:
            with transaction.atomic():
                transaction.on_commit(lambda o=outcome: enqueue({}, kind=f"on_{o}"))
                if outcome == "rollback":
                    raise Abort
        except Abort:
            pass
    assert _jobs(django_db, "on_rollback") == []
    assert len(_jobs(django_db, "on_commit")) == 1

    # An idempotent enqueue inside the block: the conflict is caught, the block commits.
    with transaction.atomic():
        first = enqueue({"n": 3}, kind="tx_unique", unique_opts={})
        with pytest.raises(awa.UniqueConflict):
            enqueue({"n": 3}, kind="tx_unique", unique_opts={})
        enqueue({"n": 4}, kind="tx_unique")
    committed = [row[0] for row in _jobs(django_db, "tx_unique")]
    assert len(committed) == 2 and committed[0] == first.id


async def test_aenqueue_joins_the_same_transaction_from_async_code(django_db: str) -> None:
    from asgiref.sync import sync_to_async
    from django.db import transaction

    from awa.contrib.django import aenqueue

    @sync_to_async
    def atomic_enter() -> Any:
        block = transaction.atomic()
        block.__enter__()
        return block

    block = await atomic_enter()
    await aenqueue({}, kind="async_tx")
    assert _jobs(django_db, "async_tx") == []
    await sync_to_async(block.__exit__)(None, None, None)
    assert len(_jobs(django_db, "async_tx")) == 1


def test_the_queue_of_a_registered_task_is_the_default(django_db: str) -> None:
    from orders.tasks import SendConfirmation

    from awa.contrib.django import enqueue

    job = enqueue(SendConfirmation(order_id=0))
    assert job.queue == "email" and job.kind == "send_confirmation"
    assert enqueue(SendConfirmation(order_id=0), queue="urgent").queue == "urgent"


def test_bad_settings_name_their_key() -> None:
    from awa.contrib.django import conf

    with pytest.raises(awa.ValidationError, match=r"AWA\['MAX_CONNECTIONS'\].*>= 1"):
        conf.parse({"MAX_CONNECTIONS": 0})
    with pytest.raises(awa.ValidationError, match=r"AWA\['QUEUS'\]: unknown setting"):
        conf.parse({"QUEUS": {"email": 1}})
    with pytest.raises(awa.ValidationError, match=r"AWA\['QUEUES'\]\['email'\]"):
        conf.parse({"QUEUES": {"email": "ten"}})
    for name in ("a=b", "a:b", "-x"):  # awa_worker could not pass them on as --queue
        with pytest.raises(awa.ValidationError, match=r"AWA\['QUEUES'\]"):
            conf.parse({"QUEUES": {name: 2}})
    assert conf.parse({"QUEUES": {"email": 3}}).queues == {"email": 3}
    with pytest.raises(awa.ValidationError, match=r"AWA\['LISTEN_URL'\]"):
        conf.parse({"LISTEN_URL": ""})


def test_listen_url_reaches_the_projects_client(
    django_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django.test import override_settings

    import awa.contrib.django as integration

    monkeypatch.setattr(integration, "_client", None)  # made afresh from these settings
    with override_settings(AWA={"LISTEN_URL": django_db}):
        assert integration.get_client().listen_url == django_db


def test_the_queues_page_is_read_only_and_for_staff(django_db: str) -> None:
    from django.contrib.auth.models import User
    from django.test import Client

    from awa.contrib.django import enqueue

    enqueue({}, kind="shown", queue="reports")
    browser = Client()
    assert browser.get("/awa/").status_code == 302  # to the login page
    user = User.objects.create_user("clerk", password="x")
    browser.force_login(user)
    assert browser.get("/awa/").status_code == 302
    User.objects.filter(pk=user.pk).update(is_staff=True)
    page = browser.get("/awa/")
    assert page.status_code == 200
    assert b'<tr data-queue="reports"><td>reports</td><td>1</td>' in page.content
    assert b"awa serve" in page.content  # no DASHBOARD_URL set: says how to get one
    assert browser.post("/awa/").status_code == 405


def _manage(url: str, *argv: str, **kwargs: Any) -> subprocess.Popen[str]:
    env = {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "shopsite.settings"}
    return subprocess.Popen(
        [sys.executable, "manage.py", *argv],
        cwd=EXAMPLE,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,
    )


def test_an_order_is_confirmed_by_manage_py_awa_worker(django_db: str) -> None:
    from django.test import Client
    from orders.models import Order

    placed = Client().post("/orders/", {"email": "ada@example.com"})
    assert placed.status_code == 201
    order_id, job_id = placed.json()["order"], placed.json()["job"]
    assert Client().get(f"/orders/{order_id}/").json()["confirmation_sent"] is False

    # Django's own options are Django's (manage.py applied them), not awa worker's flags.
    worker = _manage(
        django_db, "awa_worker", "--settings=shopsite.settings", "--pythonpath", ".",
        "--shutdown-timeout-ms", "2000",
    )  # fmt: skip
    try:
        wait_until(
            lambda: Order.objects.get(pk=order_id).confirmation_sent_at is not None,
            timeout=60,
        )
    finally:
        worker.send_signal(signal.SIGTERM)
        _, stderr = worker.communicate(timeout=30)
    assert worker.returncode == 0, stderr
    assert "worker running (email)" in stderr  # AWA["QUEUES"] when no --queue is given
    assert Client().get(f"/orders/{order_id}/").json()["confirmation_sent"] is True
    assert (job_id, "email", "completed") in _jobs(django_db, "send_confirmation")
    assert Client().post("/orders/", {"email": "nope"}).status_code == 400


def test_awa_worker_processes_run_from_another_directory(django_db: str, tmp_path: Path) -> None:
    """`python /srv/app/manage.py awa_worker --processes 2` from elsewhere (a systemd unit
    without WorkingDirectory): the children could not import the settings (exit 2)."""
    from django.test import Client
    from orders.models import Order

    order_id = Client().post("/orders/", {"email": "bob@example.com"}).json()["order"]
    env = {**os.environ, "DATABASE_URL": django_db, "DJANGO_SETTINGS_MODULE": "shopsite.settings"}
    env["PYTHONPATH"] = str(ROOT / "src")  # awa of this checkout; nothing of the app
    worker = subprocess.Popen(
        [sys.executable, str(EXAMPLE / "manage.py"), "awa_worker", "--proc", "2",
         "--shutdown-timeout-ms", "2000"],  # abbreviated, as argparse allows
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        wait_until(
            lambda: (
                Order.objects.get(pk=order_id).confirmation_sent_at is not None
                or worker.poll() is not None
            ),
            timeout=60,
        )
    finally:
        worker.send_signal(signal.SIGTERM)
        _, stderr = worker.communicate(timeout=30)
    assert worker.returncode == 0, stderr
    assert Order.objects.get(pk=order_id).confirmation_sent_at is not None, stderr


def test_the_import_path_goes_to_awa_workers_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """A PYTHONPATH holding the parent's whole sys.path reached every program a handler
    started (another interpreter failed: "SRE module mismatch"): the project's own
    directories go in a variable only `awa worker` reads."""
    from awa.cli.commands.worker import IMPORT_PATH_VARIABLE
    from awa.contrib.django.management.commands import awa_worker

    monkeypatch.delenv("PYTHONPATH", raising=False)
    monkeypatch.setattr(sys, "path", [str(EXAMPLE), ".", *sys.path])
    awa_worker._hand_on_import_path()
    handed = os.environ.pop(IMPORT_PATH_VARIABLE).split(os.pathsep)
    assert "PYTHONPATH" not in os.environ
    assert handed[:2] == [str(EXAMPLE), os.getcwd()]
    assert not any(path.startswith(sys.base_prefix) for path in handed)


def test_awa_worker_rejects_a_bad_flag_like_awa_worker(django_db: str) -> None:
    worker = _manage(django_db, "awa_worker", "--queue", "email")
    _, stderr = worker.communicate(timeout=60)
    assert worker.returncode == 2
    assert "argument --queue" in stderr.strip().splitlines()[-1]


def test_awa_worker_in_weighted_mode_lets_the_configured_queues_share_the_pool(
    django_db: str,
) -> None:
    from awa.cli.main import build_parser
    from awa.contrib.django.management.commands.awa_worker import awa_argv

    hard = build_parser().parse_args(awa_argv([]))
    assert [q.config() for q in hard.queues] == [{"name": "email", "max_workers": 4}]
    for flag in ("--global-max-workers", "--globa"):  # abbreviated, as argparse allows
        weighted = build_parser().parse_args(awa_argv([flag, "8"]))
        assert [q.config() for q in weighted.queues] == [{"name": "email"}]
    given = build_parser().parse_args(awa_argv(["--que", "other=2"]))
    assert [q.config() for q in given.queues] == [{"name": "other", "max_workers": 2}]


def test_awa_worker_reads_help_and_bad_flags_without_printing_them_itself(
    django_db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from awa.contrib.django.management.commands.awa_worker import TARGET, awa_argv

    for argv in (["--help"], ["--bogus"]):
        assert awa_argv(argv) == ["worker", TARGET, *argv]  # awa worker says it, once
    out, err = capsys.readouterr()
    assert out == "" and err == ""


def test_manage_py_awa_worker_owns_its_process_and_call_command_does_not(
    django_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`manage.py awa_worker` is a worker process: like `awa worker` it exits past threads
    a handler left running (it hung after SIGTERM once main(argv) was taken for an
    application embedding the CLI, a review); call_command runs inside an application,
    whose threads are its own."""
    from awa.contrib.django.management.commands import awa_worker

    seen: list[bool | None] = []

    def main(argv: list[str], *, own_process: bool | None = None) -> int:
        seen.append(own_process)
        return 0

    monkeypatch.setattr("awa.cli.main.main", main)
    with pytest.raises(SystemExit) as done:
        awa_worker.Command().run_from_argv(["manage.py", "awa_worker", "--queue", "email=1"])
    assert done.value.code == 0
    awa_worker.Command().handle("--queue", "email=1")
    assert seen == [True, False]
