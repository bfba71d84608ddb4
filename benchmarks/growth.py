"""Coverage grows, cost does not: a whole command's CPU and cases here against another revision.

    python -m benchmarks.growth --base DIR [--rounds 2] [--argv "run -q -n 1 --device cpu"]

Runs ``afdb ARGV`` (default: the whole database at one worker) in fresh interpreters, this
checkout and DIR (a checkout of the revision to compare with, e.g. ``git archive REV | tar
-x -C DIR``) alternately, ``--rounds`` times, and prints per round the wall time, the CPU
(the process and its children) and the number of cases each side ran, then the CPU ratio
per round with its median, and the ratio of the cases: the performance issue's "grows no
faster than the cases" compares the two. Both sides import compiled bytecode (``benchmarks.gate``).
"""

from __future__ import annotations

import argparse
import re
import shlex
import statistics
from pathlib import Path

from benchmarks.gate import ROOT, run_output

CASES = re.compile(r"(\d+) cases")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base", required=True, help="a checkout of the revision to compare with")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--argv", default="run -q -n 1 --device cpu")
    args = p.parse_args()
    argv = shlex.split(args.argv)
    trees = {"this checkout": ROOT, "base": Path(args.base).resolve()}
    rows: dict[str, list[tuple[float, float, int]]] = {k: [] for k in trees}
    for r in range(args.rounds):
        for name, tree in trees.items():
            wall, cpu, out = run_output(argv, tree=tree)
            found = CASES.findall(out)
            cases = int(found[-1]) if found else 0
            rows[name].append((wall, cpu, cases))
            print(
                f"round {r} {name:<14} wall {wall:6.1f} s  CPU {cpu:6.1f} s  {cases} cases",
                flush=True,
            )
    mine, base = rows["this checkout"], rows["base"]
    ratios = [m[1] / b[1] for m, b in zip(mine, base)]
    cases = mine[0][2] / (base[0][2] or 1)
    print(
        f"\nCPU this / base per round {[round(x, 3) for x in ratios]}, median {statistics.median(ratios):.3f}x"
    )
    print(f"cases this / base {cases:.3f}x ({mine[0][2]} / {base[0][2]})")


if __name__ == "__main__":
    main()
