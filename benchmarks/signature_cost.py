"""What ``inspect.signature`` in every ``autograd.Function.apply`` costs a run.

    python -m benchmarks.signature_cost [--source pytorch] [--rounds 5]

torch's ``Function.apply`` binds its arguments with ``inspect.signature(cls.forward)`` on
every call. This measures the share of a warm in-process run's CPU time that goes away
when the signature is cached (``functools.lru_cache`` over ``inspect.signature``, seen by
``torch.autograd.function`` only), alternating the two ways ``--rounds`` times in one
process, and the saving per call. cProfile overstates it (its cost per Python call falls
on ``inspect``'s many small functions).
"""

from __future__ import annotations

import argparse
import functools
import inspect
import os
import statistics
import time
import types

import torch.autograd.function as function_module


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--source", default="pytorch")
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    from harness.core.options import Options
    from harness.engine.runner import run_entries
    from harness.sources.database import load_source
    from harness.sources.batch_sizes import options_for_source

    entries = list(load_source(args.source))
    options = options_for_source(args.source, entries, Options())
    run_entries(entries, options)  # warm: torch's first uses, the harness's caches
    calls = [0]
    real = inspect.signature

    def counting(obj: object, *a: object, **k: object) -> inspect.Signature:
        calls[0] += 1
        return real(obj, *a, **k)  # type: ignore[arg-type]

    plain = types.SimpleNamespace(signature=counting)
    cached = types.SimpleNamespace(signature=functools.lru_cache(maxsize=None)(real))
    times: dict[str, list[float]] = {"inspect.signature per call": [], "cached": []}
    print(f"load average before: {', '.join(f'{v:.1f}' for v in os.getloadavg())}")
    for _ in range(args.rounds):
        for label, proxy in (("inspect.signature per call", plain), ("cached", cached)):
            function_module.inspect = proxy  # type: ignore[assignment]
            start = time.process_time()
            run_entries(entries, options)
            times[label].append(time.process_time() - start)
    function_module.inspect = inspect
    per_run_calls = calls[0] / args.rounds
    saved = [a - b for a, b in zip(times["inspect.signature per call"], times["cached"])]
    shares = [s / a for s, a in zip(saved, times["inspect.signature per call"])]
    print(f"--source {args.source}, warm, in this process, medians of {args.rounds}:")
    for label, ts in times.items():
        print(f"  {label:<28} CPU {statistics.median(ts):.3f} s  {[round(t, 3) for t in ts]}")
    print(
        f"  saved by caching: {100 * statistics.median(shares):.1f} % of the run "
        f"({[round(100 * s, 1) for s in shares]}), {per_run_calls:.0f} Function.apply "
        f"signatures per run, {1e6 * statistics.median(saved) / per_run_calls:.1f} us per call"
    )
    # The same saving measured directly, in a tight loop over the Functions' own forwards:
    # far less noisy than a difference of two whole runs on a busy machine.
    forwards = [e.function.forward for e in entries if hasattr(e.function, "forward")]
    loops = 200
    direct, lookup = [], []
    for _ in range(args.rounds):
        start = time.process_time()
        for _ in range(loops):
            for f in forwards:
                real(f)
        direct.append((time.process_time() - start) / (loops * len(forwards)))
        start = time.process_time()
        for _ in range(loops):
            for f in forwards:
                cached.signature(f)
        lookup.append((time.process_time() - start) / (loops * len(forwards)))
    per_call = statistics.median(direct) - statistics.median(lookup)
    run_cpu = statistics.median(times["inspect.signature per call"])
    print(
        f"  directly: inspect.signature {1e6 * statistics.median(direct):.2f} us per call, a "
        f"cached one {1e6 * statistics.median(lookup):.2f} us: {1e6 * per_call:.2f} us saved "
        f"per call x {per_run_calls:.0f} calls = {per_call * per_run_calls:.3f} s, "
        f"{100 * per_call * per_run_calls / run_cpu:.1f} % of the run's {run_cpu:.2f} s"
    )
    print(f"load average after: {', '.join(f'{v:.1f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
