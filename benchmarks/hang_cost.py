"""What a Function whose backward never returns costs a run (issue 31 part 1).

    python -m benchmarks.hang_cost [--timeout 1] [--function BackwardHangs]

Runs every default check of a planted Function (``tests/hang_functions.py``: a backward
waiting forever, or ``VmapHangs``, a vmap rule waiting forever) in this process, twice in
one run: with the timeout ledger as it is (one timeout per staticmethod and sample), and
with its staticmethod rule switched off (only "two timeouts in a check", the rule before).
Prints, for each, the cases that ran into the limit, the cases not run, and the wall time,
and the ratio of limits paid. A correct twin runs first, so torch's first uses are paid
before either. The limit scales the cost: at the default 300 s, multiply the timeouts.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--timeout", type=float, default=1.0)
    p.add_argument("--function", default="BackwardHangs")
    args = p.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from harness import check
    from harness.engine.timeouts import NOT_RUN_PREFIX, TimeoutLedger
    from tests import hang_functions as hf

    check(hf.Correct, hf.samples, timeout_s=60)  # torch's first uses
    function = getattr(hf, args.function)
    print(f"load average before: {', '.join(f'{v:.1f}' for v in os.getloadavg())}")
    rows = {}
    real = TimeoutLedger.hung_in
    for label, off in (("one per staticmethod and sample", False), ("two per check", True)):
        if off:
            TimeoutLedger.hung_in = lambda self, entry, sample: {}  # type: ignore[method-assign]
        try:
            start = time.perf_counter()
            r = check(function, hf.samples, timeout_s=args.timeout)
            wall = time.perf_counter() - start
        finally:
            TimeoutLedger.hung_in = real  # type: ignore[method-assign]
        timeouts = [c for c in r.cases if c.status == "timeout"]
        ran = [c for c in timeouts if not c.message.startswith(NOT_RUN_PREFIX)]
        rows[label] = len(ran)
        print(
            f"{label:34s} {len(r.cases)} cases: {len(ran)} ran into the {args.timeout:g} s "
            f"limit, {len(timeouts) - len(ran)} not run; {wall:.1f} s wall"
        )
    before, after = rows["two per check"], rows["one per staticmethod and sample"]
    print(
        f"limits paid: {after} vs {before} ({after / max(before, 1):.2f}x); at the default "
        f"300 s: {after * 300 / 60:.0f} min vs {before * 300 / 60:.0f} min"
    )


if __name__ == "__main__":
    main()
