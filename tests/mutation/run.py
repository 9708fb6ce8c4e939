"""Run the hand-written mutants of tests/mutation/mutants.py and report survivors.

    python -m tests.mutation.run            # every mutant (make mutate)
    python -m tests.mutation.run -k shrink  # those whose name contains "shrink"

Each mutant is applied to a fresh copy of src/ in a temporary directory, put first on
PYTHONPATH (ahead of the editable install), and its tests run with ``-x``: a failing
test kills it. Exit status 1 when any mutant survives. Tests that start worker
subprocesses import the unmutated package, so mutants name in-process tests only.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.mutation.mutants import MUTANTS, Mutant

ROOT = Path(__file__).resolve().parents[2]


def _apply(mutant: Mutant, src: Path) -> None:
    target = src / "awa" / mutant.path
    text = target.read_text()
    if text.count(mutant.old) != 1:
        raise SystemExit(f"mutant {mutant.name!r}: the text to replace is not in {mutant.path}")
    target.write_text(text.replace(mutant.old, mutant.new))


def _run(mutant: Mutant, workdir: Path) -> tuple[bool, float]:
    src = workdir / "src"
    if src.exists():
        shutil.rmtree(src)
    shutil.copytree(ROOT / "src", src, ignore=shutil.ignore_patterns("__pycache__"))
    _apply(mutant, src)
    env = {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{ROOT}"}
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *mutant.tests],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
    )
    return proc.returncode != 0, time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-k", dest="pattern", default="", help="only mutants whose name has it")
    args = parser.parse_args()
    chosen = [m for m in MUTANTS if args.pattern in m.name]
    survivors = []
    with tempfile.TemporaryDirectory(prefix="awa-mutants-") as tmp:
        for mutant in chosen:
            killed, seconds = _run(mutant, Path(tmp))
            print(
                f"{'killed  ' if killed else 'SURVIVED'} {seconds:6.1f}s  {mutant.name}", flush=True
            )
            if not killed:
                survivors.append(mutant)
    print(f"\n{len(chosen) - len(survivors)} of {len(chosen)} mutants killed")
    for mutant in survivors:
        print(f"  survivor: {mutant.name} ({mutant.path}; tests: {', '.join(mutant.tests)})")
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
