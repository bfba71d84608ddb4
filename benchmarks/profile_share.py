"""Where does `afdb run` spend its time? Profile a run and split self-time by package.

    python -m benchmarks.profile_share [--source pytorch] [--checks vmap,contract]

Prints cases per second and the share of self-time in torch (transforms,
kernels, autograd), in the harness (plans, references, comparison, runner),
in the registry's Functions (numpy-backed forwards and rules), and elsewhere.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time

from harness.options import Options
from harness.runner import run_entries
from harness.sources import load_source, options_for_source

BUCKETS = (
    ("harness", "/harness/"),
    ("registry", "/autograd_function_db/"),
    ("torch", "/torch/"),
    ("numpy", "/numpy/"),
)


def source_run(source: str, options: Options) -> tuple[list, Options]:
    """The entries of ``source`` and the options a run of it uses (its batch sizes)."""
    entries = list(load_source(source))
    return entries, options_for_source(source, entries, options)


def profile_run(options: Options, source: str = "afdb") -> dict[str, float]:
    entries, options = source_run(source, options)
    prof = cProfile.Profile()
    start = time.perf_counter()
    prof.enable()
    results = run_entries(entries, options)
    prof.disable()
    wall = time.perf_counter() - start
    stats = pstats.Stats(prof)
    totals = {name: 0.0 for name, _ in BUCKETS}
    totals["builtins/other"] = 0.0

    def bucket(filename: str) -> str:
        for name, marker in BUCKETS:
            if marker in filename:
                return name
        return "builtins/other"

    for (filename, _line, _func), (_cc, _nc, tottime, _ct, callers) in stats.stats.items():  # type: ignore[attr-defined]
        if filename == "~" and callers:
            # A C function (a torch op, a builtin): charge it to whoever called it.
            weights = {k: v[3] for k, v in callers.items()}
            whole_w = sum(weights.values()) or 1.0
            for caller, w in weights.items():
                totals[bucket(caller[0])] += tottime * w / whole_w
        else:
            totals[bucket(filename)] += tottime
    whole = sum(totals.values()) or 1.0
    shares = {f"share_{k}": v / whole for k, v in totals.items()}
    shares["cases"] = float(len(results))
    shares["wall_s_profiled"] = wall
    return shares


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--source", default="afdb", help="afdb (default) or pytorch")
    p.add_argument("--checks", default=None, help="comma-separated checks (default: all)")
    args = p.parse_args()
    options = Options(checks=tuple(args.checks.split(",")) if args.checks else None)
    entries, run_options = source_run(args.source, options)
    start = time.perf_counter()
    n = len(run_entries(entries, run_options))
    wall = time.perf_counter() - start
    print(f"{n} cases in {wall:.2f} s: {n / wall:.0f} cases/s (unprofiled)")
    shares = profile_run(options, args.source)
    for k, v in shares.items():
        if k.startswith("share_"):
            print(f"{k[6:]:<16} {100 * v:5.1f}% of self-time")
    print("C functions are charged to the package that called them.")


if __name__ == "__main__":
    main()
