"""Where does `afdb run` spend its time? Profile a run and split self-time by package.

    python -m benchmarks.profile_share [--source pytorch] [--checks vmap,contract] [--by-file]
                                       [--sampling]

Prints cases per second and the share of self-time in torch (transforms,
kernels, autograd), in the harness (plans, references, comparison, runner),
in the registry's Functions (numpy-backed forwards and rules), and elsewhere.
``--sampling`` also measures the shares with a sampling profiler (a CPU-time timer
signal that notes the running Python frame's file): no cost per call, so it checks
that cProfile's per-call cost does not skew the split.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import signal
import time

from harness.core.options import Options
from harness.engine.runner import run_entries
from harness.sources.database import load_source
from harness.sources.batch_sizes import options_for_source

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


def _kind(func: str) -> str:
    """What a C function is: a torch op (a tensor method, a ``torch.*`` builtin) or another
    builtin (system calls, containers, hashing)."""
    return "torch ops" if "torch" in func else "other C functions"


def _charged(stats: pstats.Stats) -> list[tuple[str, float, str]]:
    """(file the time is charged to, seconds, what ran) for every profiled function: a C
    function (a torch op, a builtin) is charged to its callers' files, in proportion to
    their calls; what ran is "Python code", "torch ops" or "other C functions"."""
    out: list[tuple[str, float, str]] = []
    for (filename, _line, func), (_cc, _nc, tottime, _ct, callers) in stats.stats.items():  # type: ignore[attr-defined]
        if filename == "~" and callers:
            weights = {k: v[3] for k, v in callers.items()}
            whole_w = sum(weights.values()) or 1.0
            kind = _kind(func)
            out += [(caller[0], tottime * w / whole_w, kind) for caller, w in weights.items()]
        else:
            out.append((filename, tottime, "Python code"))
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
    for filename, seconds, _ in _charged(stats):
        totals[_bucket(filename)] += seconds
    whole = sum(totals.values()) or 1.0
    return {f"share_{k}": v / whole for k, v in totals.items()}


def harness_by_file(stats: pstats.Stats) -> list[tuple[str, float]]:
    """Self-time charged to each harness module (seconds, largest first)."""
    per: dict[str, float] = {}
    for filename, seconds, _ in _charged(stats):
        if _bucket(filename) == "harness":
            name = filename.rsplit("/harness/", 1)[-1]
            per[name] = per.get(name, 0.0) + seconds
    return sorted(per.items(), key=lambda kv: -kv[1])


def harness_by_kind(stats: pstats.Stats) -> dict[str, float]:
    """The harness's self-time by what ran: its own Python code, the torch ops it calls (the
    copies, stacks, draws and comparisons the checks need) and other C functions (the
    system calls of the per-case isolation, hashing, containers)."""
    per = {"Python code": 0.0, "torch ops": 0.0, "other C functions": 0.0}
    for filename, seconds, kind in _charged(stats):
        if _bucket(filename) == "harness":
            per[kind] += seconds
    return per


#: The modules of the per-case isolation (state snapshots and restores, output capture,
#: child processes, threads, the time limit).
ISOLATION = ("isolation.py", "case_state.py", "children.py")


def sampled_shares(
    entries: list, options: Options, rounds: int = 3, interval_s: float = 0.001
) -> tuple[dict[str, float], int]:
    """Shares of CPU time by package from timer-signal samples over ``rounds`` runs: each
    sample counts for the file of the Python frame running when it arrives (a C function
    delays the signal to its return, so its time goes to its caller, as in ``_charged``).
    Returns the shares and the number of samples (their resolution is the kernel tick)."""
    counts = {name: 0 for name, _ in BUCKETS}
    counts["builtins/other"] = 0

    def on_sample(_signum: int, frame: object) -> None:
        code = getattr(frame, "f_code", None)
        counts[_bucket(code.co_filename if code is not None else "")] += 1

    previous = signal.signal(signal.SIGPROF, on_sample)
    signal.setitimer(signal.ITIMER_PROF, interval_s, interval_s)
    try:
        for _ in range(rounds):
            run_entries(entries, options)
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0, 0)
        signal.signal(signal.SIGPROF, previous)
    n = sum(counts.values())
    return {f"share_{k}": v / (n or 1) for k, v in counts.items()}, n


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
    p.add_argument(
        "--sampling",
        action="store_true",
        help="also measure the shares with a sampling profiler (3 more runs)",
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
        whole = sum(seconds for _f, seconds, _k in _charged(stats)) or 1.0
        print("\nharness self-time by module (C functions charged to their callers):")
        by_file = harness_by_file(stats)
        for name, seconds in by_file:
            print(f"  {name:<24} {1000 * seconds:7.1f} ms  {100 * seconds / whole:5.1f}%")
        isolation = sum(seconds for name, seconds in by_file if name in ISOLATION)
        print(
            f"  {'(per-case isolation)':<24} {1000 * isolation:7.1f} ms  {100 * isolation / whole:5.1f}%"
        )
        print("\nharness self-time by what ran:")
        for kind, seconds in harness_by_kind(stats).items():
            print(f"  {kind:<24} {1000 * seconds:7.1f} ms  {100 * seconds / whole:5.1f}%")

    if args.sampling:
        shares, n = sampled_shares(entries, run_options)
        print(f"\nsampling profiler ({n} samples over 3 runs, no cost per call):")
        for k, v in shares.items():
            print(f"{k[6:]:<16} {100 * v:5.1f}% of CPU time")


if __name__ == "__main__":
    main()
