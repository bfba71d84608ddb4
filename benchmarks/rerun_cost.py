"""What a rerun of ``pytest --afdb`` with nothing changed costs: the verdict cache at work.

    python -m benchmarks.rerun_cost [--rounds 3] [--tests tests/test_softlib.py]

Copies ``examples/recorded_project`` (softlib) into a throwaway folder, runs ``pytest
--afdb`` once there to fill the verdict cache (``.pytest_cache/d/afdb-verdicts``), then
runs, alternately, the plain suite and ``pytest --afdb`` again, ``--rounds`` times, each in
a fresh interpreter. It prints each side's median wall time, their ratio within this run
(the target is at most 1.1x, issue 41), the cache line of the last rerun (how many
verdicts were reused and why the others were checked), and the first run's time for
scale. The default test file calls only Functions the cache can hold; the whole suite
(``--tests tests``) also calls live-valued ones and two with unseeded inputs, which are
checked on every run (docs/pytest-plugin.md, "the verdict cache").
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROJECT = ROOT / "examples" / "recorded_project"


def _run(cwd: Path, *argv: str) -> tuple[float, str]:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-W", "ignore", *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    return time.perf_counter() - start, proc.stdout


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tests", default="tests/test_softlib.py")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        proj = Path(tmp) / "proj"
        shutil.copytree(PROJECT, proj, ignore=shutil.ignore_patterns(".afdb", "__pycache__"))
        first, _ = _run(proj, args.tests, "--afdb", "--afdb-cache-clear")
        plain: list[float] = []
        rerun: list[float] = []
        out = ""
        for _ in range(args.rounds):
            plain.append(_run(proj, args.tests)[0])
            took, out = _run(proj, args.tests, "--afdb")
            rerun.append(took)
    line = next((ln for ln in out.splitlines() if ln.startswith("verdict cache: ")), "")
    p, r = statistics.median(plain), statistics.median(rerun)
    print(f"first --afdb run: {first:.2f} s (fills the cache)")
    print(f"plain: median {p:.2f} s; --afdb rerun: median {r:.2f} s; ratio {r / p:.2f}x")
    print(line or "no cache line (is pytest's cache provider on?)")


if __name__ == "__main__":
    main()
