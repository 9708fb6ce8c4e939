"""Run the hand-written mutants of tests/mutation/mutants.py and report survivors.

    python -m tests.mutation.run            # every mutant (make mutate)
    python -m tests.mutation.run -k shrink  # those whose name contains "shrink"

Each mutant is applied to a fresh copy of src/ in a temporary directory, put first on
PYTHONPATH (ahead of the editable install), and its tests run with ``-x``: a failing
test kills it. Exit status 1 when any mutant survives. Tests that start worker
subprocesses import the unmutated package, so mutants name in-process tests only.

The chosen mutants' tests first run once on the unmutated code, and nothing is judged
unless they pass: a database that was down, or a misspelt test path, failed every run and
read as every mutant killed (a review). After that baseline a mutant is killed only by
failing tests (pytest's exit status 1) or a collection it broke (2); any other status (no
tests, a usage error) is the runner's error, not a kill.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from tests.mutation.mutants import MUTANTS, Mutant

ROOT = Path(__file__).resolve().parents[2]


def _apply(mutant: Mutant, src: Path) -> None:
    target = src / "awa" / mutant.path
    text = target.read_text()
    if text.count(mutant.old) != 1:
        raise SystemExit(f"mutant {mutant.name!r}: the text to replace is not in {mutant.path}")
    target.write_text(text.replace(mutant.old, mutant.new))


FAILED, BROKEN = 1, 2  # pytest: tests failed; interrupted (here: a collection error)


def _pytest(tests: Sequence[str], src: Path, *, quiet: bool = True) -> int:
    """pytest's exit status for ``tests`` with ``src`` first on the import path."""
    env = {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{ROOT}"}
    out = subprocess.DEVNULL if quiet else None
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests],
        cwd=ROOT, env=env, stdout=out, stderr=out, check=False,
    ).returncode  # fmt: skip


def _run(mutant: Mutant, workdir: Path) -> tuple[int, float]:
    src = workdir / "src"
    if src.exists():
        shutil.rmtree(src)
    shutil.copytree(ROOT / "src", src, ignore=shutil.ignore_patterns("__pycache__"))
    _apply(mutant, src)
    started = time.monotonic()
    return _pytest(mutant.tests, src), time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-k", dest="pattern", default="", help="only mutants whose name has it")
    args = parser.parse_args()
    chosen = [m for m in MUTANTS if args.pattern in m.name]
    baseline = sorted({test for m in chosen for test in m.tests})
    status = _pytest(baseline, ROOT / "src", quiet=False) if baseline else 0
    if status != 0:
        print(f"\nthe unmutated code fails its tests (pytest exit {status}): nothing judged")
        return 2
    survivors, errors = [], []
    with tempfile.TemporaryDirectory(prefix="awa-mutants-") as tmp:
        for mutant in chosen:
            status, seconds = _run(mutant, Path(tmp))
            verdict = {0: "SURVIVED", FAILED: "killed  ", BROKEN: "killed  "}.get(
                status, "ERROR   "
            )
            print(f"{verdict} {seconds:6.1f}s  {mutant.name}", flush=True)
            if status == 0:
                survivors.append(mutant)
            elif status not in (FAILED, BROKEN):
                errors.append(mutant)
    print(f"\n{len(chosen) - len(survivors) - len(errors)} of {len(chosen)} mutants killed")
    for mutant in errors:
        print(f"  error: {mutant.name} (pytest could not run {', '.join(mutant.tests)})")
    for mutant in survivors:
        print(f"  survivor: {mutant.name} ({mutant.path}; tests: {', '.join(mutant.tests)})")
    return 1 if survivors or errors else 0


if __name__ == "__main__":
    sys.exit(main())
