"""Where does `afdb run` spend its time? Profile a run and split self-time by package.

    python -m benchmarks.profile_share [--source pytorch] [--checks vmap,contract] [--by-file]

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


def _bucket(filename: str) -> str:
    for name, marker in BUCKETS:
        if marker in filename:
            return name
    return "builtins/other"


def _charged(stats: pstats.Stats) -> list[tuple[str, float]]:
    """(file the time is charged to, seconds) for every profiled function: a C function (a
    torch op, a builtin) is charged to its callers' files, in proportion to their calls."""
    out: list[tuple[str, float]] = []
    for (filename, _line, _func), (_cc, _nc, tottime, _ct, callers) in stats.stats.items():  # type: ignore[attr-defined]
        if filename == "~" and callers:
            weights = {k: v[3] for k, v in callers.items()}
            whole_w = sum(weights.values()) or 1.0
            out += [(caller[0], tottime * w / whole_w) for caller, w in weights.items()]
        else:
            out.append((filename, tottime))
    return out


def profiled(options: Options, source: str = "afdb") -> tuple[pstats.Stats, int, float]:
    """A profiled run of ``source``: the stats, the number of cases and the wall seconds."""
    entries, options = source_run(source, options)
    prof = cProfile.Profile()
    start = time.perf_counter()
    prof.enable()
    results = run_entries(entries, options)
    prof.disable()
    return pstats.Stats(prof), len(results), time.perf_counter() - start


def shares_of(stats: pstats.Stats) -> dict[str, float]:
    totals = {name: 0.0 for name, _ in BUCKETS}
    totals["builtins/other"] = 0.0
    for filename, seconds in _charged(stats):
        totals[_bucket(filename)] += seconds
    whole = sum(totals.values()) or 1.0
    return {f"share_{k}": v / whole for k, v in totals.items()}


def harness_by_file(stats: pstats.Stats) -> list[tuple[str, float]]:
    """Self-time charged to each harness module (seconds, largest first)."""
    per: dict[str, float] = {}
    for filename, seconds in _charged(stats):
        if _bucket(filename) == "harness":
            name = filename.rsplit("/harness/", 1)[-1]
            per[name] = per.get(name, 0.0) + seconds
    return sorted(per.items(), key=lambda kv: -kv[1])


def profile_run(options: Options, source: str = "afdb") -> dict[str, float]:
    stats, cases, wall = profiled(options, source)
    shares = shares_of(stats)
    shares["cases"] = float(cases)
    shares["wall_s_profiled"] = wall
    return shares


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--source", default="afdb", help="afdb (default) or pytorch")
    p.add_argument("--checks", default=None, help="comma-separated checks (default: all)")
    p.add_argument(
        "--by-file", action="store_true", help="also split the harness's self-time by module"
    )
    args = p.parse_args()
    options = Options(checks=tuple(args.checks.split(",")) if args.checks else None)
    entries, run_options = source_run(args.source, options)
    start = time.perf_counter()
    n = len(run_entries(entries, run_options))
    wall = time.perf_counter() - start
    print(f"{n} cases in {wall:.2f} s: {n / wall:.0f} cases/s (unprofiled)")
    stats, _cases, _wall = profiled(options, args.source)
    for k, v in shares_of(stats).items():
        print(f"{k[6:]:<16} {100 * v:5.1f}% of self-time")
    print("C functions are charged to the package that called them.")
    if args.by_file:
        whole = sum(seconds for _f, seconds in _charged(stats)) or 1.0
        print("\nharness self-time by module (C functions charged to their callers):")
        for name, seconds in harness_by_file(stats):
            print(f"  {name:<24} {1000 * seconds:7.1f} ms  {100 * seconds / whole:5.1f}%")


if __name__ == "__main__":
    main()
