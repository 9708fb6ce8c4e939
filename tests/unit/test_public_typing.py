"""The public API as a user's type checker sees it: a correct program written as the
README shows passes mypy --strict, and the mistakes a typed API can catch are caught —
a handler of another args type or of none, a hook taking a Job instead of the event, a
misspelt keyword on the sync client (tests/typecheck/user_program.py, lines marked E:)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = ROOT / "tests" / "typecheck" / "user_program.py"


def test_the_typed_api_passes_correct_code_and_catches_the_marked_mistakes(
    tmp_path: Path,
) -> None:
    pytest.importorskip("mypy")
    marked = {
        number
        for number, line in enumerate(PROGRAM.read_text().splitlines(), start=1)
        if "# E:" in line
    }
    env = {**os.environ, "MYPYPATH": str(ROOT / "src"), "PYTHONPATH": ""}
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary",
         "--cache-dir", str(tmp_path / "cache"), str(PROGRAM)],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    errors = {int(m.group(1)) for m in re.finditer(r"user_program\.py:(\d+): error", result.stdout)}
    assert errors == marked, result.stdout
