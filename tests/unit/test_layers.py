"""The import layering of STYLE.md, checked: leaves import nothing of ours, the database
layer never reaches up into the worker or the operator surfaces, and the CLI and the
dashboard use only the public API."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "awa"


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name for name in found if name == "awa" or name.startswith("awa.")}


def _modules(*parts: str) -> list[Path]:
    base = SRC.joinpath(*parts)
    return sorted(base.rglob("*.py")) if base.is_dir() else [base.with_suffix(".py")]


def test_leaf_modules_import_nothing_of_ours() -> None:
    assert _imports(SRC / "errors.py") == set()
    # types raises awa errors from Job's worker-only methods, and needs nothing else.
    assert _imports(SRC / "types.py") <= {"awa.errors", "awa.errors.WorkerNotRunning"}


@pytest.mark.parametrize("path", _modules("db") + _modules("sql"), ids=str)
def test_database_layer_never_imports_upwards(path: Path) -> None:
    upward = ("awa.worker", "awa.cli", "awa.dashboard", "awa.client", "awa.maintenance")
    assert not {name for name in _imports(path) if name.startswith(upward)}


@pytest.mark.parametrize("path", _modules("cli") + _modules("dashboard"), ids=str)
def test_operator_surfaces_use_the_public_api(path: Path) -> None:
    internal = ("awa.worker", "awa.client", "awa.maintenance", "awa.db.")
    allowed = {"awa.db.migrations", "awa.db.migrations.render_sql"}  # `awa migrate --sql`
    offending = {
        name for name in _imports(path) if name.startswith(internal) and name not in allowed
    }
    assert not offending, f"{path.name} reaches into internals: {sorted(offending)}"
